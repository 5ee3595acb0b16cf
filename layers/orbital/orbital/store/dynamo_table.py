"""The table port on the single DynamoDB table (boto3's low-level client).

Items keep their payload as one JSON string attribute `d` (no Decimal round trips, no empty-string rules), beside
`PK`/`SK`, optional `GSI1PK`/`GSI1SK`, `ttl`, and a few flat attributes used in conditions. Items whose `ttl` has
passed are treated as absent (DynamoDB deletes expired items lazily). Conditions (`orbital.store.conditions`) are
rendered to `ConditionExpression` with their names and values.

With `cache=True` (a one-process gateway, where every write goes through this object) reads of single items and of
partitions (whole, by SK prefix, or the last N) are served from memory. Writes go through: a put, a batch or an
update that returns the new item replaces it in the cached item and partition; anything whose result is unknown
(a failed or conditional write, an update without the new item) is dropped instead. Every write to a partition
bumps its generation, and a read stores what it fetched only if no write to that partition landed meanwhile, so the
cache never holds an item older than the table. Partitions larger than `PARTITION_CACHE_ITEMS` are not kept.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from orbital.errors import ConflictError
from orbital.protocol.jsontext import compact, loads
from orbital.store import conditions as cond
from orbital.store.table import (
    RESERVED,
    ConditionFailedError,
    Record,
    ReturnValues,
    Table,
    check_attrs,
    check_batch,
    check_gsi,
    check_key,
    check_query,
    check_ttl,
    check_update,
)

if TYPE_CHECKING:
    from botocore.client import BaseClient

_UNCACHED: Any = object()
T = TypeVar("T")
PARTITION_CACHE_ITEMS = 5000


_compact_json = compact(ensure_ascii=False)
"""`json.dumps(value, separators=(",", ":"), ensure_ascii=False)` without building an encoder for every item."""


def _to_attr(value: Any) -> dict[str, Any]:
    if type(value) is str:
        return {"S": value}
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, int | float):
        return {"N": str(value)}
    if value is None:
        return {"NULL": True}
    return {"S": str(value)}


def _from_attr(attr: Mapping[str, Any]) -> Any:
    if "S" in attr:
        return attr["S"]
    if "N" in attr:
        text = attr["N"]
        return int(text) if text.lstrip("-").isdigit() else float(text)
    if "BOOL" in attr:
        return attr["BOOL"]
    return None


def _with_condition(kwargs: dict[str, Any], condition: cond.Condition | None) -> None:
    """Add `condition` (rendered) to a request, beside any names and values it has already."""
    if condition is None:
        return
    if not isinstance(condition, cond.Condition):
        raise TypeError(f"a condition is an orbital.store.conditions value, not {type(condition).__name__}")
    expression, names, values = condition.render()
    kwargs["ConditionExpression"] = expression
    if names:
        kwargs["ExpressionAttributeNames"] = {**kwargs.get("ExpressionAttributeNames", {}), **names}
    if values:
        kwargs["ExpressionAttributeValues"] = {
            **kwargs.get("ExpressionAttributeValues", {}),
            **{k: _to_attr(v) for k, v in values.items()},
        }


def _sort_key(item: Mapping[str, Any]) -> str:
    return str(item["SK"]["S"])


class DynamoTable(Table):
    def __init__(self, client: BaseClient, name: str, *, cache: bool = False) -> None:
        self.client = client
        self.name = name
        self._cache_on = cache
        self._lock = threading.Lock()
        self._items: dict[tuple[str, str], dict[str, Any] | None] = {}
        self._parts: dict[str, list[dict[str, Any]]] = {}
        """Cached partitions: every item of the partition, in SK order."""
        self._generations: dict[str, int] = {}
        self._views: dict[tuple[str, str], tuple[dict[str, Any], Any, Any, int | None]] = {}
        """What `view` made of a cached item: (the item, the function, what it made, the item's ttl)."""

    # --- encoding ---------------------------------------------------------------------------------------------

    @staticmethod
    def _encode(
        pk: str,
        sk: str,
        data: Mapping[str, Any],
        *,
        ttl: int | None = None,
        gsi: tuple[str, str] | None = None,
        attrs: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        item: dict[str, Any] = {
            "PK": {"S": pk},
            "SK": {"S": sk},
            "d": {"S": _compact_json(data)},
        }
        ttl = check_ttl(ttl)
        if ttl is not None:
            item["ttl"] = {"N": str(ttl)}
        gsi = check_gsi(gsi)
        if gsi is not None:
            item["GSI1PK"] = {"S": gsi[0]}
            item["GSI1SK"] = {"S": gsi[1]}
        for key, value in check_attrs(attrs).items():
            item[key] = _to_attr(value)
        return item

    @staticmethod
    def _decode(item: Mapping[str, Any]) -> Record | None:
        ttl = int(item["ttl"]["N"]) if "ttl" in item else None
        if ttl is not None and ttl < time.time():
            return None
        attrs = {k: _from_attr(v) for k, v in item.items() if k not in RESERVED}
        raw = item.get("d", {}).get("S")
        return Record(
            pk=item["PK"]["S"],
            sk=item["SK"]["S"],
            data=loads(raw) if raw else {},
            attrs=attrs,
            ttl=ttl,
        )

    @staticmethod
    def _live(item: Mapping[str, Any], now: float) -> bool:
        ttl = item.get("ttl")
        return ttl is None or int(ttl["N"]) >= now

    # --- cache ------------------------------------------------------------------------------------------------

    def _generation(self, pk: str) -> int:
        return self._generations.get(pk, 0)

    def forget_cached(self) -> None:
        """Drop every cached item and partition (after work that read widely, so the cache holds only what requests
        read; writes of other processes are seen again)."""
        if self._cache_on:
            with self._lock:
                for pk in set(self._parts) | {pk for pk, _ in self._items}:
                    self._generations[pk] = self._generation(pk) + 1
                self._items.clear()
                self._parts.clear()
                self._views.clear()

    def forget(self, key: tuple[str, str]) -> None:
        """Drop one item from the cache (it was changed by a write that did not go through this Table)."""
        self._forget(*key)

    def _begin_write(self, pk: str) -> None:
        """A write to `pk` is under way: reads that started before it must not store what they fetched."""
        if self._cache_on:
            with self._lock:
                self._generations[pk] = self._generation(pk) + 1

    def _forget(self, pk: str, sk: str) -> None:
        if self._cache_on:
            with self._lock:
                self._generations[pk] = self._generation(pk) + 1
                self._items.pop((pk, sk), None)
                self._parts.pop(pk, None)
                self._views.pop((pk, sk), None)

    def _remember(self, pk: str, sk: str, item: dict[str, Any] | None) -> None:
        """Write-through after a successful write: `item` is now the stored item (None: deleted)."""
        if not self._cache_on:
            return
        with self._lock:
            self._generations[pk] = self._generation(pk) + 1
            self._items[(pk, sk)] = item
            self._views.pop((pk, sk), None)
            part = self._parts.get(pk)
            if part is None:
                return
            sks = [i["SK"]["S"] for i in part]
            at = bisect.bisect_left(sks, sk)
            present = at < len(part) and sks[at] == sk
            if item is None:
                if present:
                    del part[at]
            elif present:
                part[at] = item
            else:
                part.insert(at, item)

    def know_absent(self, key: tuple[str, str]) -> None:
        """The caller knows this item does not exist (a key nobody could have written yet): with the cache on, a read
        of it is answered without a request."""
        self._remember(key[0], key[1], None)

    # --- reads ------------------------------------------------------------------------------------------------

    def get(self, key: tuple[str, str]) -> Record | None:
        pk, sk = key
        generation = 0
        if self._cache_on:
            with self._lock:
                if key in self._items:
                    raw = self._items[key]
                    return self._decode(raw) if raw is not None else None
                generation = self._generation(pk)
        resp = self.client.get_item(TableName=self.name, Key={"PK": {"S": pk}, "SK": {"S": sk}}, ConsistentRead=True)
        item = resp.get("Item")
        if self._cache_on:
            with self._lock:
                if self._generation(pk) == generation:  # no write landed while we read
                    self._items[key] = item
        return self._decode(item) if item else None

    def view(self, key: tuple[str, str], make: Callable[[Record], T]) -> T | None:
        """`make(record)` of the item at `key`, None if there is none. With the cache on, what `make` made is kept
        with the cached item and handed out again until the item changes or its `ttl` passes: callers share it and
        must not change it. Without the cache, `make(get(key))` each time."""
        if not self._cache_on:
            rec = self.get(key)
            return make(rec) if rec is not None else None
        with self._lock:
            raw = self._items.get(key, _UNCACHED)
            memo = self._views.get(key)
        if raw is _UNCACHED:
            self.get(key)  # into the cache, unless a write landed meanwhile
            with self._lock:
                raw = self._items.get(key, _UNCACHED)
            if raw is _UNCACHED:
                rec = self.get(key)
                return make(rec) if rec is not None else None
        elif memo is not None and memo[0] is raw and memo[1] == make and (memo[3] is None or memo[3] >= time.time()):
            return memo[2]
        if raw is None:
            return None
        rec = self._decode(raw)
        if rec is None:
            return None
        made = make(rec)
        with self._lock:
            if self._items.get(key, _UNCACHED) is raw:  # still the current item
                self._views[key] = (raw, make, made, rec.ttl)
        return made

    def get_many(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Record]:
        wanted = list(dict.fromkeys(keys))
        found: dict[tuple[str, str], Record] = {}
        missing: list[tuple[str, str]] = []
        for key in wanted:
            if self._cache_on:
                with self._lock:
                    if key in self._items:
                        raw = self._items[key]
                        rec = self._decode(raw) if raw is not None else None
                        if rec:
                            found[key] = rec
                        continue
            missing.append(key)
        for start in range(0, len(missing), 100):
            chunk = missing[start : start + 100]
            with self._lock:
                generations = {pk: self._generation(pk) for pk, _ in chunk}
            request = {
                self.name: {
                    "Keys": [{"PK": {"S": pk}, "SK": {"S": sk}} for pk, sk in chunk],
                    "ConsistentRead": True,
                }
            }
            seen: set[tuple[str, str]] = set()
            while request:
                resp = self.client.batch_get_item(RequestItems=request)
                for item in resp.get("Responses", {}).get(self.name, []):
                    key = (item["PK"]["S"], item["SK"]["S"])
                    seen.add(key)
                    if self._cache_on:
                        with self._lock:
                            if self._generation(key[0]) == generations[key[0]]:
                                self._items[key] = item
                    rec = self._decode(item)
                    if rec:
                        found[key] = rec
                request = resp.get("UnprocessedKeys") or {}
            if self._cache_on:
                with self._lock:
                    for key in chunk:
                        if key not in seen and self._generation(key[0]) == generations[key[0]]:
                            self._items[key] = None
        return found

    def query(
        self,
        pk: str,
        *,
        sk_prefix: str | None = None,
        sk_between: tuple[str, str] | None = None,
        forward: bool = True,
        limit: int | None = None,
    ) -> list[Record]:
        sk_prefix = check_query(sk_prefix, None, limit, sk_between)
        if not self._cache_on:
            items = self._query_items(pk, sk_prefix=sk_prefix, sk_between=sk_between, forward=forward, limit=limit)
            return [r for r in (self._decode(i) for i in items) if r][:limit]
        with self._lock:
            cached = self._parts.get(pk)
            generation = self._generation(pk)
        if cached is None:
            everything = self._query_items(pk, sk_prefix=None, forward=True, limit=None)
            if len(everything) <= PARTITION_CACHE_ITEMS:
                with self._lock:
                    if self._generation(pk) == generation:  # no write landed while we read
                        self._parts[pk] = everything
            cached = everything
        else:
            cached = list(cached)
        if sk_prefix is not None:
            cached = [i for i in cached if i["SK"]["S"].startswith(sk_prefix)]
        elif sk_between is not None:
            low, high = sk_between
            start = bisect.bisect_left(cached, low, key=_sort_key)
            cached = cached[start : bisect.bisect_right(cached, high, lo=start, key=_sort_key)]
        if not forward:
            cached = cached[::-1]
        recs: list[Record] = []
        for item in cached:  # decoded only up to `limit`
            if limit is not None and len(recs) >= limit:
                break
            rec = self._decode(item)
            if rec:
                recs.append(rec)
        return recs

    def _query_items(
        self,
        pk: str,
        *,
        sk_prefix: str | None,
        forward: bool,
        limit: int | None,
        index: str | None = None,
        sk_max: str | None = None,
        sk_between: tuple[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """The stored items of a (table or index) partition. With `limit`, pages until that many live items are
        found (expired ones still stored count for DynamoDB's `Limit`, not for ours)."""
        pk_name, sk_name = ("GSI1PK", "GSI1SK") if index else ("PK", "SK")
        expr = "#pk = :pk"
        values: dict[str, Any] = {":pk": {"S": pk}}
        names = {"#pk": pk_name}
        if sk_prefix is not None:
            expr += " AND begins_with(#sk, :sk)"
            values[":sk"] = {"S": sk_prefix}
            names["#sk"] = sk_name
        elif sk_between is not None:
            expr += " AND #sk BETWEEN :sklow AND :skhigh"
            values[":sklow"] = {"S": sk_between[0]}
            values[":skhigh"] = {"S": sk_between[1]}
            names["#sk"] = sk_name
        elif sk_max is not None:
            expr += " AND #sk <= :skmax"
            values[":skmax"] = {"S": sk_max}
            names["#sk"] = sk_name
        kwargs: dict[str, Any] = {
            "TableName": self.name,
            "KeyConditionExpression": expr,
            "ExpressionAttributeValues": values,
            "ExpressionAttributeNames": names,
            "ScanIndexForward": forward,
        }
        if index:
            kwargs["IndexName"] = index
        else:
            kwargs["ConsistentRead"] = True
        items: list[dict[str, Any]] = []
        live = 0
        now = time.time()
        while True:
            if limit is not None:
                kwargs["Limit"] = max(1, limit - live)
            resp = self.client.query(**kwargs)
            page = resp.get("Items", [])
            items.extend(page)
            live += sum(1 for i in page if self._live(i, now))
            last = resp.get("LastEvaluatedKey")
            if not last or (limit is not None and live >= limit):
                break
            kwargs["ExclusiveStartKey"] = last
        return items

    def query_index(
        self, gsi_pk: str, *, sk_prefix: str | None = None, limit: int | None = None, sk_max: str | None = None
    ) -> list[Record]:
        sk_prefix = check_query(sk_prefix, sk_max, limit)
        items = self._query_items(gsi_pk, sk_prefix=sk_prefix, forward=True, limit=limit, index="GSI1", sk_max=sk_max)
        return [r for r in (self._decode(i) for i in items) if r][:limit]

    # --- writes -----------------------------------------------------------------------------------------------

    def put(
        self,
        key: tuple[str, str],
        data: Mapping[str, Any],
        *,
        ttl: int | None = None,
        gsi: tuple[str, str] | None = None,
        attrs: Mapping[str, Any] | None = None,
        condition: cond.Condition | None = None,
        return_old: bool = False,
    ) -> Record | None:
        pk, sk = check_key(key)
        kwargs: dict[str, Any] = {
            "TableName": self.name,
            "Item": self._encode(pk, sk, data, ttl=ttl, gsi=gsi, attrs=attrs),
        }
        _with_condition(kwargs, condition)
        if return_old:
            kwargs["ReturnValues"] = "ALL_OLD"
        self._begin_write(pk)
        try:
            resp = self.client.put_item(**kwargs)
        except self.client.exceptions.ConditionalCheckFailedException as exc:
            self._forget(pk, sk)
            raise ConflictError(f"write conflict on {pk}/{sk}") from exc
        except Exception:
            self._forget(pk, sk)
            raise
        self._remember(pk, sk, kwargs["Item"])  # write-through: the item we just stored is the current one
        old = resp.get("Attributes")
        return self._decode(old) if old else None

    def update(
        self,
        key: tuple[str, str],
        *,
        set_attrs: Mapping[str, Any] | None = None,
        add: Mapping[str, int] | None = None,
        condition: cond.Condition | None = None,
        return_values: ReturnValues = "ALL_NEW",
        unindex: bool = False,
        current_on_conflict: bool = False,
        ttl: int | None = None,
    ) -> Record | None:
        pk, sk = check_key(key)
        assigns_of, adds_of = check_update(set_attrs, add, ttl, unindex, return_values)
        parts: list[str] = []
        names: dict[str, str] = {}
        attr_values: dict[str, Any] = {}
        assigns = []
        for i, (name, value) in enumerate(assigns_of.items()):
            names[f"#s{i}"] = name
            attr_values[f":s{i}"] = _to_attr(value)
            assigns.append(f"#s{i} = :s{i}")
        new_ttl = check_ttl(ttl)
        if new_ttl is not None:
            names["#ttl"] = "ttl"
            attr_values[":ttl"] = {"N": str(new_ttl)}
            assigns.append("#ttl = :ttl")
        if assigns:
            parts.append("SET " + ", ".join(assigns))
        if adds_of:
            adds = []
            for i, (name, amount) in enumerate(adds_of.items()):
                names[f"#a{i}"] = name
                attr_values[f":a{i}"] = {"N": str(amount)}
                adds.append(f"#a{i} :a{i}")
            parts.append("ADD " + ", ".join(adds))
        if unindex:
            parts.append("REMOVE GSI1PK, GSI1SK")
        kwargs: dict[str, Any] = {
            "TableName": self.name,
            "Key": {"PK": {"S": pk}, "SK": {"S": sk}},
            "UpdateExpression": " ".join(parts),
            "ReturnValues": return_values,
        }
        if names:
            kwargs["ExpressionAttributeNames"] = names
        if attr_values:
            kwargs["ExpressionAttributeValues"] = attr_values
        _with_condition(kwargs, condition)
        if condition is not None and current_on_conflict:
            kwargs["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        self._begin_write(pk)
        try:
            resp = self.client.update_item(**kwargs)
        except self.client.exceptions.ConditionalCheckFailedException as exc:
            self._forget(pk, sk)
            if current_on_conflict:
                current = exc.response.get("Item")
                raise ConditionFailedError(
                    f"update conflict on {pk}/{sk}", self._decode(current) if current else None
                ) from exc
            raise ConflictError(f"update conflict on {pk}/{sk}") from exc
        except Exception:
            self._forget(pk, sk)
            raise
        item = resp.get("Attributes")
        if return_values == "ALL_NEW" and item and "PK" in item:
            self._remember(pk, sk, item)
        else:
            self._forget(pk, sk)
        if not item:
            return None
        return self._decode(item)

    def delete(
        self,
        key: tuple[str, str],
        *,
        condition: cond.Condition | None = None,
        return_old: bool = False,
    ) -> Record | None:
        pk, sk = check_key(key)
        kwargs: dict[str, Any] = {"TableName": self.name, "Key": {"PK": {"S": pk}, "SK": {"S": sk}}}
        _with_condition(kwargs, condition)
        if return_old:
            kwargs["ReturnValues"] = "ALL_OLD"
        self._begin_write(pk)
        try:
            resp = self.client.delete_item(**kwargs)
        except self.client.exceptions.ConditionalCheckFailedException as exc:
            self._forget(pk, sk)
            raise ConflictError(f"delete conflict on {pk}/{sk}") from exc
        except Exception:
            self._forget(pk, sk)
            raise
        self._remember(pk, sk, None)
        old = resp.get("Attributes")
        return self._decode(old) if old else None

    def write_batch(
        self,
        puts: Iterable[tuple[tuple[str, str], Mapping[str, Any]]] = (),
        deletes: Iterable[tuple[str, str]] = (),
    ) -> None:
        put_list, delete_list = check_batch(puts, deletes)
        requests: list[dict[str, Any]] = []
        touched: list[tuple[str, str, dict[str, Any] | None]] = []
        for (pk, sk), data in put_list:
            item = self._encode(pk, sk, data)
            requests.append({"PutRequest": {"Item": item}})
            touched.append((pk, sk, item))
        for pk, sk in delete_list:
            requests.append({"DeleteRequest": {"Key": {"PK": {"S": pk}, "SK": {"S": sk}}}})
            touched.append((pk, sk, None))
        for pk in {t[0] for t in touched}:
            self._begin_write(pk)
        try:
            for start in range(0, len(requests), 25):
                pending: dict[str, Any] = {self.name: requests[start : start + 25]}
                for attempt in range(8):
                    resp = self.client.batch_write_item(RequestItems=pending)
                    pending = resp.get("UnprocessedItems") or {}
                    if not pending:
                        break
                    time.sleep(min(1.0, 0.05 * 2**attempt))
                if pending:
                    raise ConflictError("batch write left unprocessed items", retryable=True)
        except Exception:
            for pk, sk, _ in touched:
                self._forget(pk, sk)
            raise
        for pk, sk, written in touched:
            self._remember(pk, sk, written)

    # --- expiry -----------------------------------------------------------------------------------------------

    def _expired_keys(self, now: float, limit: int | None) -> list[tuple[str, str]]:
        """Keys of stored items whose `ttl` is before `now` (a scan: DynamoDB's own TTL process does this on AWS)."""
        kwargs: dict[str, Any] = {
            "TableName": self.name,
            "FilterExpression": "#ttl < :now",
            "ProjectionExpression": "PK, SK",
            "ExpressionAttributeNames": {"#ttl": "ttl"},
            "ExpressionAttributeValues": {":now": _to_attr(now)},
            "ConsistentRead": True,
        }
        found: list[tuple[str, str]] = []
        while limit is None or len(found) < limit:
            resp = self.client.scan(**kwargs)
            found.extend((item["PK"]["S"], item["SK"]["S"]) for item in resp.get("Items", []))
            last = resp.get("LastEvaluatedKey")
            if not last:
                break
            kwargs["ExclusiveStartKey"] = last
        return found[:limit] if limit is not None else found

    def delete_expired(self, now: float, *, limit: int | None = None) -> int:
        """As the port's: the expired items a scan finds, each deleted on the condition that it is still expired (on
        AWS, DynamoDB's own TTL process does this; the sweep is for tooling and tests)."""
        deleted = 0
        for key in self._expired_keys(now, limit):
            try:
                self.delete(key, condition=cond.lt("ttl", now))
            except ConflictError:
                continue  # written again with a later ttl since it was listed
            finally:
                self._forget(*key)  # gone from the cache, not kept there as absent
            deleted += 1
        return deleted
