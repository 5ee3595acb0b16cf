"""The configuration's sections: every key the gateway reads, its type, its range and what it means, as pydantic
models (`Configuration` at the root), with the value types and validators they share. `orbital.domain.config_schema`
walks and checks them."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from orbital.domain.approval_policy import DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS, MIN_TIMEOUT_MS, REGEX_FLAGS, regex_error
from orbital.domain.config import DEFAULT_UNTRUSTED_TOOLS
from orbital.domain.mcp_names import SERVER_NAME_TEXT, valid_server_name
from orbital.domain.taint import TAINT_RULE

# --- providers -------------------------------------------------------------------------------------------------------

BUILT_IN_PROVIDERS = ("anthropic", "openai", "google", "bedrock", "openrouter", "groq", "ollama", "lmstudio", "vllm")
"""The providers a model may name without a `providers.<name>.baseUrl` (`agent.providers._resolve` knows each)."""
PROVIDER_ALIASES = {"amazon-bedrock": "bedrock", "gemini": "google"}
WIRE_APIS = ("openai", "anthropic", "google", "openai-completions", "anthropic-messages", "google-generative-ai")


def _canonical(provider: str) -> str:
    name = provider.strip().lower()
    return PROVIDER_ALIASES.get(name, name)


def provider_problem(config: dict[str, Any], provider: Any) -> str | None:
    """Why `provider` cannot be a model's provider in `config` (None when it can): a built-in name or alias, or a
    name with `providers.<name>.baseUrl` set."""
    if not isinstance(provider, str) or not provider.strip():
        return "a provider name"
    if _canonical(provider) in BUILT_IN_PROVIDERS:
        return None
    found = config.get("providers")
    sections: dict[str, Any] = found if isinstance(found, dict) else {}
    for name in dict.fromkeys((provider, provider.strip().lower(), _canonical(provider))):
        section = sections.get(name)
        if isinstance(section, dict) and isinstance(section.get("baseUrl"), str) and section["baseUrl"].strip():
            return None
    known = ", ".join(BUILT_IN_PROVIDERS)
    return f"a known provider ({known}) or one configured with providers.{provider.strip()}.baseUrl"


MODEL_FORM = "`provider/model-id` or {provider, id}"


def parse_model(value: Any) -> dict[str, str] | None:
    """`provider/model-id` as `{provider, id}` (provider lowercased); None when the text is not of that form."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    if "/" not in text or re.search(r"\s", text):
        return None
    provider, model_id = text.split("/", 1)
    if not provider or not model_id:
        return None
    return {"provider": provider.lower(), "id": model_id}


def normalize(path: str, value: Any) -> Any:
    """The value `config.set` stores: a model written as `provider/model-id` is stored as `{provider, id}` (what
    every reader takes); anything else as given."""
    if path == "model" and isinstance(value, str):
        parsed = parse_model(value)
        return parsed if parsed is not None else value
    return value


# --- value types -----------------------------------------------------------------------------------------------------


def _zone(value: str) -> str:
    try:
        ZoneInfo(value.strip())
    except (ValueError, KeyError, OSError):
        raise ValueError("an IANA time zone this machine knows (e.g. Europe/Paris)") from None
    return value


def _http_url(value: str) -> str:
    if not re.match(r"^https?://[^\s/]+", value.strip()):
        raise ValueError("an http:// or https:// URL")
    return value


_DURATION = re.compile(r"^(?:0|(?=\d)(?:\d+h)?(?:\d+m)?(?:\d+s)?)?$")


def _duration(value: str) -> str:
    if not _DURATION.match(value.strip()):
        raise ValueError('a duration such as "30m", "1h30m" or "45s" ("0" or "" turns it off)')
    return value


def _every_or_off(value: str) -> str:
    if value.strip().lower() == "off":
        return value
    if not _DURATION.match(value.strip()) or value.strip() in ("", "0"):
        raise ValueError('a duration such as "24h", "6h" or "30m", or "off"')
    return value


def _clock(value: str) -> str:
    if not re.match(r"^([01]\d|2[0-3]):[0-5]\d$|^24:00$", value):
        raise ValueError('a time of day "HH:MM"')
    return value


def _as_text(value: Any) -> Any:
    """A number where a sender id is expected is taken as its digits (ids are compared as text)."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _model_text(value: Any) -> Any:
    """A model written as `provider/model-id` is checked as `{provider, id}`; other text is refused."""
    if isinstance(value, str):
        parsed = parse_model(value)
        if parsed is None:
            raise ValueError(MODEL_FORM)
        return parsed
    return value


def _listed_model(value: Any) -> Any:
    return {"id": value} if isinstance(value, str) else value


Zone = Annotated[str, AfterValidator(_zone)]
HttpUrl = Annotated[str, AfterValidator(_http_url)]
Duration = Annotated[str, AfterValidator(_duration)]
Clock = Annotated[str, AfterValidator(_clock)]
EveryOrOff = Annotated[str, AfterValidator(_every_or_off)]
SenderId = Annotated[str, BeforeValidator(_as_text)]
Name = Annotated[str, Field(min_length=1)]

_TYPE_TEXT: dict[Any, str] = {
    Zone: "IANA time zone",
    HttpUrl: "http(s) URL",
    Duration: 'duration ("30m", "1h30m", "45s"; "0" is off)',
    Clock: '"HH:MM"',
    EveryOrOff: 'duration ("24h", "6h", "30m") or "off"',
    SenderId: "string",
    Name: "non-empty string",
}


def setting(description: str, *, default: Any = None, **constraints: Any) -> Any:
    """A field of the schema: optional in a stored configuration, documented, `default` as the reader applies it
    when nothing is set (shown in the reference; `orbital.domain.config.defaults()` is what fills the effective
    configuration)."""
    return Field(None, description=description, json_schema_extra={"default": default}, **constraints)


class Section(BaseModel):
    """A section: its known keys are typed; keys it does not know are kept (and warned about by `config.set`)."""

    model_config = ConfigDict(extra="allow", strict=True, populate_by_name=True)


# --- the sections ----------------------------------------------------------------------------------------------------


class ModelRef(Section):
    provider: Name | None = setting(
        "The provider: a built-in one (" + ", ".join(BUILT_IN_PROVIDERS) + ") or one with `providers.<name>.baseUrl`.",
        default="anthropic",
    )
    id: Name | None = setting("The model's id at that provider.", default="claude-sonnet-4-20250514")


class ListedModel(Section):
    id: Name | None = setting("The model's id.")
    name: str | None = setting("What a model picker shows.")
    contextWindow: int | None = setting("Its context window in tokens.", ge=1)
    vision: bool | None = setting("Whether it takes images (else guessed from the id).")


class ProviderSettings(Section):
    baseUrl: HttpUrl | None = setting(
        "The endpoint (an OpenAI-compatible API unless `api` says otherwise); required for a provider that is not "
        "built in."
    )
    api: Literal[WIRE_APIS] | None = setting("The wire API of a provider that is not native.", default="openai")  # type: ignore[valid-type]
    headers: dict[str, str] | None = setting("Extra HTTP headers of each call.")
    models: list[Annotated[ListedModel, BeforeValidator(_listed_model)]] | None = setting(
        "The models a model picker offers: ids, or {id, name?, contextWindow?, vision?}."
    )
    contextWindow: int | None = setting("The context window of its models, in tokens.", ge=1)
    maxTokens: int | None = setting("The output budget of a call, in tokens.", default=8192, ge=1)
    region: str | None = setting("Bedrock only: the AWS region (else the environment's).")


class Timeouts(Section):
    llmMs: int | None = setting("One model call, retries included (ms).", default=300000, ge=1000)
    toolMs: int | None = setting("A tool call on a node (ms).", default=60000, ge=1000)
    logsMs: int | None = setting(
        "Reading a node's logs (ms); the agent's log reads wait at most 120000.", default=20000, ge=1000
    )
    transferMs: int | None = setting("A file transfer between nodes (ms).", default=600000, ge=1000)
    skillProbeMaxAgeMs: int | None = setting(
        "How long a skill probe's answer counts (ms).", default=600000, ge=1000, le=86_400_000
    )


class Auth(Section):
    token: str | None = setting("A gateway token for GSV clients. Not used when the gateway has a token of its own.")


TranscriptionProvider = Literal[
    "", "auto", "default", "workers-ai", "openai", "aws", "amazon", "transcribe", "amazon-transcribe",
    "none", "off", "disabled", "false",
]  # fmt: skip


class Transcription(Section):
    provider: TranscriptionProvider | None = setting(
        "Who transcribes voice messages: openai, aws, none, or auto (workers-ai: OpenAI with a key, else AWS on AWS).",
        default="workers-ai",
    )
    model: str | None = setting("The OpenAI transcription model.")
    timeoutSeconds: float | None = setting("One transcription (s).", default=120, ge=5, le=600)
    languageCode: str | None = setting("AWS: the spoken language (e.g. en-US); else it is identified.")
    languageOptions: list[str] | None = setting("AWS: the languages to identify among.")


class ChannelAccount(Section):
    botToken: str | None = setting("Telegram: the bot's token.")
    webhookSecret: str | None = setting("Telegram: the secret its webhook calls carry.")
    webhookUrl: HttpUrl | None = setting("Telegram: the webhook URL (else built from publicBaseUrl).")


class Channel(Section):
    dmPolicy: Literal["open", "allowlist", "pairing"] | None = setting(
        "Who may write in a direct message: anyone, allowFrom only, or allowFrom plus senders the owner pairs.",
        default="pairing",
    )
    allowFrom: list[SenderId] | None = setting("The senders let in (ids).", default=[])
    requireMention: bool | None = setting("In groups, answer only messages that mention the agent.", default=False)
    accounts: dict[str, ChannelAccount] | None = setting("Telegram: the bot accounts, by account id.")
    apiBaseUrl: HttpUrl | None = setting("Telegram: the Bot API server.", default="https://api.telegram.org")
    publicBaseUrl: HttpUrl | None = setting("Telegram: where the REST API is reachable, for the webhook URL.")


class ResetPolicy(Section):
    mode: Literal["manual", "daily", "idle"] | None = setting("When a session starts afresh.", default="daily")
    atHour: int | None = setting("daily: the hour (UTC) of the reset.", default=4, ge=0, le=23)
    idleMinutes: int | None = setting("idle: minutes without activity before a reset.", default=60, ge=1)


class SessionBudget(Section):
    maxTokens: int | None = setting("Read as budgets.session when that is not set (0 or null: none).", ge=0)


class Session(Section):
    defaultResetPolicy: ResetPolicy | None = setting("The reset policy a new session adopts.")
    mainKey: Annotated[str, Field(pattern=r"^[^\s:]+$")] | None = setting(
        "The main session's key (one word, no colons).", default="main"
    )
    dmScope: Literal["main", "per-peer", "per-channel-peer", "per-account-channel-peer"] | None = setting(
        "Which session a direct message goes to.", default="main"
    )
    identityLinks: dict[str, list[str]] | None = setting(
        "One person's ids on several channels (`channel:id`), by name: they share a session.", default={}
    )
    defaultBudget: SessionBudget | None = setting("An older place of the session token budget.")


class SkillEntry(Section):
    enabled: bool | None = setting("false turns the skill off.", default=True)
    always: bool | None = setting("Always in the prompt (else when its requirements are met).")
    requires: dict[str, Any] | None = setting("Requirements added to the skill's own (bins, env, config, os…).")


class Skills(Section):
    entries: dict[str, SkillEntry] | None = setting("Per-skill settings, by skill name.", default={})


class ActiveHours(Section):
    start: Clock | None = setting("From (HH:MM).", default="08:00")
    end: Clock | None = setting("Until (HH:MM).", default="23:00")
    timezone: Zone | None = setting("Their time zone (else userTimezone).")


class Heartbeat(Section):
    every: Duration | None = setting("How often the agent is woken.", default="30m")
    prompt: str | None = setting("What it is told.", default="(reads HEARTBEAT.md)")
    target: str | None = setting("Where its reply goes: last (the last channel), none, or a channel.", default="last")
    activeHours: ActiveHours | None = setting("When heartbeats run.")


class SpendLimits(Section):
    session: float | None = setting("USD one session may spend (0 or null: no limit).", ge=0)
    daily: float | None = setting("USD per day, in spend.timeZone (0 or null: no limit).", ge=0)
    monthly: float | None = setting("USD per month, in spend.timeZone (0 or null: no limit).", ge=0)


class ModelPrice(Section):
    inputPerMTok: float | None = setting("USD per million input tokens.", ge=0)
    outputPerMTok: float | None = setting("USD per million output tokens.", ge=0)
    cacheReadPerMTok: float | None = setting("USD per million tokens read from the cache (else the input price).", ge=0)
    cacheWritePerMTok: float | None = setting(
        "USD per million tokens written to the cache (else the input price).", ge=0
    )


class AgentSpend(Section):
    limits: SpendLimits | None = setting("The agent's own limits, beside the gateway's (ADR 0044).")


class Spend(Section):
    limits: SpendLimits | None = setting("Spend caps in USD: every model call of every kind counts (ADR 0044).")
    alertAt: float | None = setting(
        "The share of a limit that sends `spend.alert` and a note to the main session.", default=0.8, gt=0, le=1
    )
    timeZone: Zone | None = setting("The time zone of the daily and monthly periods.", default="UTC")
    prices: dict[str, ModelPrice] | None = setting(
        'Prices by `"provider/model"`, over the price database (for local or private models).', default={}
    )
    unpricedModels: Literal["refuse", "allow"] | None = setting(
        "A model without a price while a limit applies: refused, or allowed (counted as free).", default="refuse"
    )


class AgentEntry(Section):
    id: Name | None = setting("The agent's id.")
    default: bool | None = setting("The agent of the main session.")
    heartbeat: Heartbeat | None = setting("Its heartbeat, over agents.defaultHeartbeat.")
    spend: AgentSpend | None = setting("The agent's spend caps in USD.")


class PeerMatch(Section):
    kind: str | None = setting("dm, group or channel.")
    id: str | None = setting("The peer's id.")


class BindingMatch(Section):
    channel: str | None = setting("The channel.")
    accountId: str | None = setting("The channel account.")
    peer: PeerMatch | None = setting("The peer.")


class Binding(Section):
    agentId: Name | None = setting("The agent that answers.")
    match: BindingMatch | None = setting("What a message must match.")


class Agents(Section):
    agents: list[AgentEntry] | None = setting("The agents besides main.", default=[], alias="list")
    bindings: list[Binding] | None = setting("Which agent answers which channel, account or peer.", default=[])
    defaultHeartbeat: Heartbeat | None = setting("The heartbeat of every agent.")
    maxIterations: int | None = setting(
        "Model calls with tools in one run before it ends with a note.", default=25, ge=1
    )


class Compaction(Section):
    enabled: bool | None = setting("Summarize long sessions.", default=True)
    reserveTokens: int | None = setting("Tokens kept free for the reply.", default=20000, ge=0)
    keepRecentTokens: int | None = setting("Recent tokens kept as they are.", default=20000, ge=0)
    extractMemories: bool | None = setting("Keep facts from archived sessions in memory.", default=True)


class Cron(Section):
    enabled: bool | None = setting("Run scheduled jobs.", default=True)
    maxJobs: int | None = setting("Jobs at most.", default=200, ge=1)
    maxRunsPerJobHistory: int | None = setting("Runs kept per job.", default=200, ge=1)
    maxConcurrentRuns: int | None = setting("Jobs running at once.", default=4, ge=1)


class Budgets(Section):
    session: int | None = setting("Tokens per session without a budget of its own (0 or null: no limit).", ge=0)
    daily: int | None = setting("Tokens per UTC day, every session together (0 or null: no limit).", ge=0)
    monthly: int | None = setting("Tokens per UTC month, every session together (0 or null: no limit).", ge=0)


class Windie(Section):
    registration: bool | None = setting("WindieOS clients may register accounts.", default=False)
    dailyUploads: int | None = setting("Files one WindieOS install may upload per UTC day.", default=200, ge=1)
    dailyUploadBytes: int | None = setting(
        "Bytes one WindieOS install may upload per UTC day.", default=512 * 1024 * 1024, ge=1
    )


class Media(Section):
    publicLinkDays: float | None = setting("How long a public media link lives (days).", default=7, gt=0, le=3650)


class Xeno(Section):
    partials: bool | None = setting("xeno queries also get the reply's text so far.", default=False)
    newSessionPrompt: str | None = setting("What a new xeno session is told first.")


class Embeddings(Section):
    provider: str | None = setting("The embeddings provider (with a key or an endpoint).")
    model: str | None = setting("The embeddings model.")
    dimensions: int | None = setting("The vectors' size.", ge=1)
    timeoutMs: int | None = setting("One call (ms).", default=20000, ge=1)


# --- tool approvals and taint ------------------------------------------------------------------------------------


WHEN_TAINTED_ALLOW = (
    "`ask` or `deny`: `allow` would let a run that read someone else's content (a message from a sender who is not "
    "an owner, a web page, an MCP server) run shell commands, write files or send messages without asking, which "
    "is what a prompt injection needs"
)
SAFE_EVERYTHING = (
    "patterns of tools you vouch for, not `*`: marking every tool safe turns the taint rule off (a run that read "
    "someone else's content could run anything unasked)"
)
_OWNER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*:\S+$")
OWNER_FORM = '"{channel}:{senderId}" (e.g. "telegram:123456789")'


def _owner(value: str) -> str:
    if not _OWNER.match(value):
        raise ValueError(OWNER_FORM)
    return value


def _not_allow(value: Any) -> Any:
    if value == "allow":
        raise ValueError(WHEN_TAINTED_ALLOW)
    return value


def _not_everything(value: str) -> str:
    if not value.strip().strip("*"):
        raise ValueError(SAFE_EVERYTHING)
    return value


def _regex_detail(why: str, source: Any) -> str:
    """`why` with Python's own words about where the pattern breaks, when it has any."""
    if isinstance(source, str):
        try:
            re.compile(source)
        except re.error as exc:
            return f"{why}: {exc}"
    return why


ToolPattern = Annotated[str, Field(min_length=1)]
SafePattern = Annotated[str, Field(min_length=1), AfterValidator(_not_everything)]
Owner = Annotated[str, AfterValidator(_owner)]
_TYPE_TEXT[Owner] = OWNER_FORM
_TYPE_TEXT[SafePattern] = "tool name pattern (`*` any text), not `*` alone"


class ArgumentCondition(Section):
    path: Name = Field(
        description="Required. A dot path into the call's arguments (`command`, `options.force`, `steps.0.name`)."
    )
    op: Literal["equals", "contains", "startsWith", "regex"] = Field(
        description="Required. equals: the same JSON value; contains, startsWith: text; regex: a JavaScript regex."
    )
    value: Any = Field(description="Required. What the argument is compared with (a regex's source for `regex`).")
    flags: str | None = setting("regex only: JavaScript flags (i, m, s; g, u, d, v change nothing; y anchors).")

    @model_validator(mode="after")
    def _regex_compiles(self) -> ArgumentCondition:
        if self.op == "regex":
            why = regex_error(self.value, self.flags)
            if why is not None:
                raise ValueError(
                    f"a regex that compiles, with flags among `{REGEX_FLAGS}` ({_regex_detail(why, self.value)})"
                )
        elif self.flags is not None:
            raise ValueError("`flags` only with op `regex`")
        return self


class ApprovalRule(Section):
    id: Name | None = setting(
        "The rule's id (shown in the prompt as `Policy rule:`; without one, an approval remembered for the session "
        "covers the same call only)."
    )
    tool: Name = Field(
        description="Required. The tool name the model calls, `*` for any text: `*__Bash`, `n1__*`, `gsv__WriteFile`."
    )
    when: list[ArgumentCondition] | None = setting("Argument conditions, all of which must hold.")
    decision: Literal["allow", "ask", "deny"] = Field(description="Required. What a call the rule matches gets.")
    reason: str | None = setting("Why (shown in the prompt, and to the model on a deny).")

    @model_validator(mode="after")
    def _not_the_taint_rule(self) -> ApprovalRule:
        if self.id == TAINT_RULE:
            raise ValueError(f"a rule id other than `{TAINT_RULE}` (the taint rule's, ADR 0041)")
        return self


class ToolApproval(Section):
    defaultDecision: Literal["allow", "ask", "deny"] | None = setting(
        "What a tool call no rule matches gets.", default="allow"
    )
    rules: list[ApprovalRule] | None = setting(
        "Ordered rules, the first match wins: {id, tool, when?, decision, reason?}.", default=[]
    )
    timeoutMs: int | None = setting(
        "How long an approval waits for an answer before the call is denied (ms).",
        default=DEFAULT_TIMEOUT_MS,
        ge=MIN_TIMEOUT_MS,
        le=MAX_TIMEOUT_MS,
    )
    whenTainted: Annotated[Literal["ask", "deny"], BeforeValidator(_not_allow)] | None = setting(
        "What a risky tool call (shell, file writes, messages elsewhere, config/cron changes, MCP tools) gets while "
        "the run is tainted by content not from an owner, whatever the rules say (ADR 0041).",
        default="ask",
    )
    untrustedTools: list[ToolPattern] | None = setting(
        "Tools whose results taint the run (web fetches, MCP servers): name patterns.",
        default=list(DEFAULT_UNTRUSTED_TOOLS),
    )
    safeTools: list[SafePattern] | None = setting(
        "Tools never counted risky (nor untrusted), e.g. an MCP server you vouch for: name patterns.", default=[]
    )

    @model_validator(mode="after")
    def _unique_ids(self) -> ToolApproval:
        seen: set[str] = set()
        for rule in self.rules or []:
            if rule.id is None:
                continue
            if rule.id in seen:
                raise ValueError(f"rules with different ids (`{rule.id}` is used twice)")
            seen.add(rule.id)
        return self


# --- MCP servers (ADR 0045) ------------------------------------------------------------------------------------


MCP_TIMEOUT_DEFAULT_MS = 30_000
MCP_TIMEOUT_MAX_MS = 300_000
MCP_TIMEOUT_MIN_MS = 1_000


class McpToolFilter(Section):
    allow: list[ToolPattern] | None = setting(
        "Only the server's tools matching one of these patterns are offered (`*` any text; matched against the "
        "server's own tool name and the offered `mcp__{server}__{tool}` name). Unset or empty: every tool.",
    )
    deny: list[ToolPattern] | None = setting("The server's tools never offered (patterns, as for allow).", default=[])


class McpOAuth(Section):
    scope: str | None = setting("The scopes to ask for (space-separated; else the server's).")
    clientId: str | None = setting("A client id registered with the server's authorization server (else registered).")
    clientSecret: str | None = setting("That client's secret, if it has one.")
    clientName: str | None = setting("The name the gateway registers under.", default="Orbital")


class McpServer(Section):
    url: HttpUrl = Field(
        description="Required. The server's endpoint (http:// or https://). Put credentials in `headers`, not here."
    )
    transport: Literal["streamable-http", "sse"] | None = setting(
        "How the server speaks: streamable HTTP, or the older HTTP+SSE.", default="streamable-http"
    )
    headers: dict[str, str] | None = setting("HTTP headers of every request (their values are secrets).", default={})
    enabled: bool | None = setting("false: the server's tools are not offered.", default=True)
    tools: McpToolFilter | None = setting("Which of the server's tools are offered.")
    trust: Literal["untrusted", "trusted"] | None = setting(
        "untrusted: the server's results taint the run (the next risky call asks, ADR 0041); trusted: they do not.",
        default="untrusted",
    )
    timeoutMs: int | None = setting(
        "One call to the server, connecting included (ms); reading its tool list waits as long (`mcp.test` and "
        "`mcp.refresh` at most 20000).",
        default=MCP_TIMEOUT_DEFAULT_MS,
        ge=MCP_TIMEOUT_MIN_MS,
        le=MCP_TIMEOUT_MAX_MS,
    )
    oauth: McpOAuth | None = setting("Present when the server needs a login (OAuth): `orbital mcp login NAME`.")


class Mcp(Section):
    servers: dict[str, McpServer] | None = setting(
        f"Remote MCP servers by name ({SERVER_NAME_TEXT}); their tools are offered as `mcp__{{name}}__{{tool}}`.",
        default={},
    )

    @model_validator(mode="after")
    def _server_names(self) -> Mcp:
        for name in self.servers or {}:
            if not valid_server_name(name):
                raise ValueError(f"server names of {SERVER_NAME_TEXT} (`{name[:40]}` is not)")
        return self


class Backup(Section):
    every: EveryOrOff | None = setting(
        "How often the local gateway backs up its data directory by itself (unset or off: only when asked).",
        default="off",
    )
    keep: int | None = setting("Backups kept: the oldest beyond this are removed.", default=7, ge=1)
    dir: str | None = setting(
        "Where backups go (made readable by you only; a relative path is under the data directory).",
        default="<data dir>/backups",
        min_length=1,
    )


class Configuration(Section):
    """The whole configuration."""

    model: Annotated[ModelRef, BeforeValidator(_model_text)] | None = setting(
        f"The model every session uses unless it picks its own: {MODEL_FORM}."
    )
    apiKeys: dict[str, str | None] | None = setting("API keys by provider name.", default={})
    providers: dict[str, ProviderSettings] | None = setting("Providers by name: endpoints, headers, models.")
    timeouts: Timeouts | None = setting("Time limits.")
    auth: Auth | None = setting("GSV's own authentication.")
    transcription: Transcription | None = setting("Voice messages.")
    channels: dict[str, Channel] | None = setting("Messengers by name (whatsapp, discord, telegram…).")
    session: Session | None = setting("Sessions.")
    skills: Skills | None = setting("Skills.")
    agents: Agents | None = setting("Agents, bindings and heartbeats.")
    compaction: Compaction | None = setting("Compaction of long sessions.")
    cron: Cron | None = setting("Scheduled jobs.")
    budgets: Budgets | None = setting("Token budgets (ADR 0026).")
    spend: Spend | None = setting("Spend caps in USD and model prices (ADR 0044).")
    userTimezone: Zone | None = setting("Your time zone: times the agent reads are in it.", default="UTC")
    systemPrompt: str | None = setting("The agent's base prompt (else the built-in one).")
    windie: Windie | None = setting("WindieOS clients.")
    media: Media | None = setting("Media and uploads.")
    xeno: Xeno | None = setting("xeno clients.")
    embeddings: Embeddings | None = setting("Embeddings (semantic search).")
    toolApproval: ToolApproval | None = setting("Asking before tools run, and the taint rule (ADRs 0040, 0041).")
    mcp: Mcp | None = setting("MCP servers whose tools the agent may use (ADR 0045).")
    backup: Backup | None = setting("Automatic local backups of the data directory (ADR 0047; none on AWS).")
    owners: list[Owner] | None = setting(
        "Channel identities that are you: their messages do not taint a run and they may answer approvals "
        '(`"{channel}:{senderId}"`, e.g. `"telegram:123456789"`). Clients with the gateway token are owners anyway.',
        default=[],
    )
