// The console's GSV client: one WebSocket to the gateway, requests matched to their responses, events fanned out
// to listeners, and a reconnect with backoff when the socket drops. It speaks only the public protocol
// (docs/protocol.md). A request too large for one WebSocket frame (a browser cannot fragment a message, and the
// gateway closes a socket whose frame passes 32 KB) goes to the same method on the HTTP API instead.

const PROTOCOL = 1;
const MAX_FRAME_BYTES = 32 * 1024;
const FRAME_MARGIN_BYTES = 2 * 1024;
const RECONNECT_MS = [500, 1000, 2000, 4000, 8000, 15000];
const TRANSIENT = new Set([503, 504]); // a connect that failed for these may work the next time

export class GatewayError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

export class Gateway {
  /**
   * @param {object} options
   * @param {string} options.wsUrl - the WebSocket to connect to
   * @param {string} options.httpBase - the HTTP API's origin (for requests too large for a frame)
   * @param {string} options.clientId - this tab's client id (a newer socket of the same id replaces an older one)
   * @param {string} options.version - the console's version, sent in `connect`
   */
  constructor({ wsUrl, httpBase, clientId, version }) {
    this.wsUrl = wsUrl;
    this.httpBase = httpBase;
    this.clientId = clientId;
    this.version = version;
    this.token = null;
    this.hello = null;
    this.state = "idle";
    this._ws = null;
    this._next = 1;
    this._pending = new Map();
    this._listeners = new Map();
    this._blobs = new Map();
    this._attempt = 0;
    this._timer = null;
    this._wanted = false;
    this._why = null;
  }

  /** Listen to an event (`chat`, ...) or to `status` ({state, error}); returns the function that stops it. */
  on(event, fn) {
    if (!this._listeners.has(event)) this._listeners.set(event, new Set());
    this._listeners.get(event).add(fn);
    return () => this._listeners.get(event)?.delete(fn);
  }

  _emit(event, payload) {
    for (const fn of [...(this._listeners.get(event) || [])]) {
      try {
        fn(payload);
      } catch (err) {
        console.error(`listener of ${event} failed`, err);
      }
    }
  }

  _status(state, error = null) {
    this.state = state;
    this._emit("status", { state, error });
  }

  /** Open the socket and send `connect`; resolves with `hello-ok`, rejects with a GatewayError (401: the token).
   * After a drop it connects again by itself, with backoff; a refusal that trying again cannot fix (the token, the
   * protocol version, being replaced by a newer socket of this client) stops that, and a refused token on a later
   * connect is told as an `unauthorized` event. */
  open(token) {
    this.token = token || null;
    this._wanted = true;
    this._why = null;
    return this._open(true);
  }

  _open(first = false) {
    clearTimeout(this._timer);
    const previous = this._ws;
    this._ws = null;
    previous?.close(1000, "reconnecting");
    this._status("connecting");
    return new Promise((resolve, reject) => {
      let ws;
      try {
        ws = new WebSocket(this.wsUrl);
      } catch (err) {
        this._wanted = false;
        this._status("closed", String(err));
        reject(new GatewayError(0, `Cannot open ${this.wsUrl}: ${err.message || err}`));
        return;
      }
      this._ws = ws;
      let settled = false;
      ws.onopen = () => {
        if (this._ws !== ws) return;
        const params = {
          minProtocol: PROTOCOL,
          maxProtocol: PROTOCOL,
          client: { id: this.clientId, version: this.version, platform: "browser", mode: "client" },
        };
        if (this.token) params.auth = { token: this.token };
        this._request("connect", params, 15000).then(
          (hello) => {
            settled = true;
            this.hello = hello;
            this._attempt = 0;
            this._status("open");
            resolve(hello);
          },
          (err) => {
            settled = true;
            if (!TRANSIENT.has(err.code)) {
              this._wanted = false; // trying again would meet the same refusal
              this._why = err.message;
            }
            if (err.code === 401 && !first) this._emit("unauthorized", err);
            reject(err);
            ws.close();
          },
        );
      };
      ws.onmessage = (msg) => {
        if (this._ws === ws) this._frame(msg.data);
      };
      ws.onclose = (ev) => {
        if (this._ws !== ws) return; // an earlier socket, already replaced
        this._ws = null;
        for (const [, waiter] of this._pending) waiter.reject(new GatewayError(503, "Disconnected from the gateway"));
        this._pending.clear();
        if (!settled) {
          settled = true;
          const code = ev.code === 4001 ? 401 : 503;
          if (code === 401) this._wanted = false;
          reject(new GatewayError(code, ev.reason || "Could not reach the gateway"));
        }
        if (this._wanted) {
          this._status("reconnecting", ev.reason || null);
          const delay = RECONNECT_MS[Math.min(this._attempt++, RECONNECT_MS.length - 1)];
          this._timer = setTimeout(() => this._open().catch(() => {}), delay);
        } else {
          this._status("closed", this._why || ev.reason || null);
        }
      };
    });
  }

  close() {
    this._wanted = false;
    clearTimeout(this._timer);
    this._ws?.close(1000, "closed by the user");
  }

  /** The most one frame may carry: what the gateway said in `hello-ok`, less a margin. */
  _frameBudget() {
    const told = this.hello?.features?.limits?.maxFrameBytes;
    return Math.min(Number.isFinite(told) ? told : MAX_FRAME_BYTES, MAX_FRAME_BYTES) - FRAME_MARGIN_BYTES;
  }

  _frame(data) {
    let frame;
    try {
      frame = JSON.parse(data);
    } catch {
      return;
    }
    if (frame.type === "res") {
      const waiter = this._pending.get(frame.id);
      if (!waiter) return;
      this._pending.delete(frame.id);
      if (frame.ok) waiter.resolve(frame.payload);
      else waiter.reject(new GatewayError(frame.error?.code ?? 500, frame.error?.message || "Request failed"));
    } else if (frame.type === "evt") {
      if (frame.event === "connection.closing") this._closing(frame.payload || {});
      this._emit(frame.event, frame.payload);
    }
  }

  /** The gateway is about to close this socket: replaced by a newer one of this client (another tab with its id) or
   * refused. Neither is fixed by connecting again. */
  _closing({ code, reason }) {
    if (code === 4001 || /replaced/i.test(reason || "")) {
      this._wanted = false;
      this._why = reason || "Closed by the gateway";
    }
  }

  _request(method, params, timeoutMs) {
    const id = `c${this._next++}`;
    const text = JSON.stringify(params === undefined ? { type: "req", id, method } : { type: "req", id, method, params });
    if (new TextEncoder().encode(text).length > this._frameBudget()) return this._http(method, params, timeoutMs);
    return new Promise((resolve, reject) => {
      if (!this._ws || this._ws.readyState !== WebSocket.OPEN) {
        reject(new GatewayError(503, "Not connected to the gateway"));
        return;
      }
      const timer = setTimeout(() => {
        this._pending.delete(id);
        reject(new GatewayError(504, `${method}: no answer within ${Math.round(timeoutMs / 1000)} s`));
      }, timeoutMs);
      this._pending.set(id, {
        resolve: (v) => (clearTimeout(timer), resolve(v)),
        reject: (e) => (clearTimeout(timer), reject(e)),
      });
      this._ws.send(text);
    });
  }

  async _http(method, params, timeoutMs) {
    const headers = { "Content-Type": "application/json", ...this._bearer() };
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), timeoutMs);
    try {
      const res = await fetch(`${this.httpBase}/api/v1/${method}`, {
        method: "POST",
        headers,
        body: JSON.stringify(params ?? {}),
        signal: abort.signal,
        credentials: "omit",
      });
      const body = await res.json().catch(() => ({}));
      if (!res.ok) throw new GatewayError(body.code ?? res.status, body.detail || res.statusText);
      return body;
    } catch (err) {
      if (err instanceof GatewayError) throw err;
      throw new GatewayError(err.name === "AbortError" ? 504 : 503, `${method}: ${err.message || err}`);
    } finally {
      clearTimeout(timer);
    }
  }

  /** The HTTP API's credential: the gateway token as a bearer (nothing on a gateway without one). */
  _bearer() {
    return this.token ? { Authorization: `Bearer ${this.token}` } : {};
  }

  /** An object of the HTTP API that needs the gateway token (`path` under its origin) as a `blob:` URL, fetched
   * once per page (the URLs live as long as the page). Rejects with a GatewayError. */
  blobUrl(path) {
    if (!this._blobs.has(path)) {
      const loading = (async () => {
        const res = await fetch(`${this.httpBase}${path}`, { headers: this._bearer(), credentials: "omit" });
        if (!res.ok) throw new GatewayError(res.status, `${path}: ${res.status} ${res.statusText}`);
        return URL.createObjectURL(await res.blob());
      })();
      loading.catch(() => this._blobs.delete(path)); // a failure is tried again the next time
      this._blobs.set(path, loading);
    }
    return this._blobs.get(path);
  }

  /** Call a method; resolves with its payload, rejects with a GatewayError. */
  call(method, params, { timeoutMs = 30000 } = {}) {
    return this._request(method, params, timeoutMs);
  }
}
