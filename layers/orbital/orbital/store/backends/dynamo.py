"""The table port on the single DynamoDB table (boto3's low-level client).

Items keep their payload as one JSON string attribute `d` (no Decimal round trips, no empty-string rules), beside
`PK`/`SK`, optional `GSI1PK`/`GSI1SK`, `ttl`, and a few flat attributes used in conditions. Items whose `ttl` has
passed are treated as absent (DynamoDB deletes expired items lazily). Conditions (`orbital.store.conditions`) are
rendered to `ConditionExpression` with their names and values.

A batch (`BatchGetItem`, `BatchWriteItem`) that DynamoDB answers only in part is sent again for what it left
(`UnprocessedKeys`, `UnprocessedItems`), with exponential backoff (tenacity's loop, `UNPROCESSED_ATTEMPTS` sends in
all); what is still left then is a retryable `ConflictError`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tenacity import RetryError, Retrying, retry_if_result, stop_after_attempt, wait_exponential

from orbital.errors import ConflictError
from orbital.protocol.jsontext import compact, loads
from orbital.store import conditions as cond
from orbital.store.table import RESERVED, ConditionFailedError, Record, ReturnValues, Table, Update

if TYPE_CHECKING:
    from botocore.client import BaseClient

UNPROCESSED_ATTEMPTS = 8
"""Sends of one batch at most while DynamoDB leaves part of it unprocessed (throttled): the waits between them are
0.05 s doubling up to 1 s, about 3.5 s in all."""


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
    expression, names, values = condition.render()
    kwargs["ConditionExpression"] = expression
    if names:
        kwargs["ExpressionAttributeNames"] = {**kwargs.get("ExpressionAttributeNames", {}), **names}
    if values:
        kwargs["ExpressionAttributeValues"] = {
            **kwargs.get("ExpressionAttributeValues", {}),
            **{k: _to_attr(v) for k, v in values.items()},
        }


def _key(pk: str, sk: str) -> dict[str, Any]:
    return {"PK": {"S": pk}, "SK": {"S": sk}}


class DynamoTable(Table):
    def __init__(self, client: BaseClient, name: str, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self.client = client
        self.name = name
        self._sleep = sleep
        """How a batch waits before it sends what DynamoDB left unprocessed (a test gives a recorder)."""

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
        """The stored item; `ttl`, `gsi` and `attrs` as the port checked them."""
        item: dict[str, Any] = {
            "PK": {"S": pk},
            "SK": {"S": sk},
            "d": {"S": _compact_json(data)},
        }
        if ttl is not None:
            item["ttl"] = {"N": str(ttl)}
        if gsi is not None:
            item["GSI1PK"] = {"S": gsi[0]}
            item["GSI1SK"] = {"S": gsi[1]}
        for key, value in (attrs or {}).items():
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

    # --- batches DynamoDB answers in part ------------------------------------------------------------------------

    def _until_processed(self, send: Callable[[dict[str, Any]], dict[str, Any]], request: dict[str, Any]) -> None:
        """`send(request)`, then `send` of what it left unprocessed (its return value), with backoff, until nothing
        is left; a retryable ConflictError when `UNPROCESSED_ATTEMPTS` sends still left some."""
        pending = request

        def attempt() -> dict[str, Any]:
            nonlocal pending
            pending = send(pending)
            return pending

        retrying = Retrying(
            retry=retry_if_result(bool),
            stop=stop_after_attempt(UNPROCESSED_ATTEMPTS),
            wait=wait_exponential(multiplier=0.05, max=1.0),
            sleep=self._sleep,
        )
        try:
            retrying(attempt)
        except RetryError as exc:
            left = sum(len(part["Keys"]) if isinstance(part, dict) else len(part) for part in pending.values())
            raise ConflictError(
                f"DynamoDB left {left} of a batch's items unprocessed after {UNPROCESSED_ATTEMPTS} attempts",
                retryable=True,
            ) from exc

    # --- reads ------------------------------------------------------------------------------------------------

    def _get(self, pk: str, sk: str) -> Record | None:
        resp = self.client.get_item(TableName=self.name, Key=_key(pk, sk), ConsistentRead=True)
        item = resp.get("Item")
        return self._decode(item) if item else None

    def _get_many(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], Record]:
        found: dict[tuple[str, str], Record] = {}

        def send(request: dict[str, Any]) -> dict[str, Any]:
            resp = self.client.batch_get_item(RequestItems=request)
            for item in resp.get("Responses", {}).get(self.name, []):
                rec = self._decode(item)
                if rec:
                    found[(rec.pk, rec.sk)] = rec
            unprocessed: dict[str, Any] = resp.get("UnprocessedKeys") or {}
            return unprocessed

        for start in range(0, len(keys), 100):
            chunk = keys[start : start + 100]
            self._until_processed(
                send, {self.name: {"Keys": [_key(pk, sk) for pk, sk in chunk], "ConsistentRead": True}}
            )
        return found

    def _query(
        self, pk: str, *, sk_prefix: str | None, sk_between: tuple[str, str] | None, forward: bool, limit: int | None
    ) -> list[Record]:
        items = self._query_items(pk, sk_prefix=sk_prefix, sk_between=sk_between, forward=forward, limit=limit)
        return [r for r in (self._decode(i) for i in items) if r][:limit]

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

    def _query_index(
        self, gsi_pk: str, *, sk_prefix: str | None, sk_max: str | None, limit: int | None
    ) -> list[Record]:
        items = self._query_items(gsi_pk, sk_prefix=sk_prefix, forward=True, limit=limit, index="GSI1", sk_max=sk_max)
        return [r for r in (self._decode(i) for i in items) if r][:limit]

    # --- writes -----------------------------------------------------------------------------------------------

    def _put(
        self,
        pk: str,
        sk: str,
        data: Mapping[str, Any],
        *,
        ttl: int | None,
        gsi: tuple[str, str] | None,
        attrs: dict[str, Any],
        condition: cond.Condition | None,
        return_old: bool,
    ) -> Record | None:
        kwargs: dict[str, Any] = {
            "TableName": self.name,
            "Item": self._encode(pk, sk, data, ttl=ttl, gsi=gsi, attrs=attrs),
        }
        _with_condition(kwargs, condition)
        if return_old:
            kwargs["ReturnValues"] = "ALL_OLD"
        try:
            resp = self.client.put_item(**kwargs)
        except self.client.exceptions.ConditionalCheckFailedException as exc:
            raise ConflictError(f"write conflict on {pk}/{sk}") from exc
        old = resp.get("Attributes")
        return self._decode(old) if old else None

    def _update(
        self,
        pk: str,
        sk: str,
        change: Update,
        *,
        condition: cond.Condition | None,
        return_values: ReturnValues,
        current_on_conflict: bool,
    ) -> Record | None:
        parts: list[str] = []
        names: dict[str, str] = {}
        attr_values: dict[str, Any] = {}
        assigns = []
        for i, (name, value) in enumerate(change.assigns.items()):
            names[f"#s{i}"] = name
            attr_values[f":s{i}"] = _to_attr(value)
            assigns.append(f"#s{i} = :s{i}")
        if change.ttl is not None:
            names["#ttl"] = "ttl"
            attr_values[":ttl"] = {"N": str(change.ttl)}
            assigns.append("#ttl = :ttl")
        if assigns:
            parts.append("SET " + ", ".join(assigns))
        if change.adds:
            adds = []
            for i, (name, amount) in enumerate(change.adds.items()):
                names[f"#a{i}"] = name
                attr_values[f":a{i}"] = {"N": str(amount)}
                adds.append(f"#a{i} :a{i}")
            parts.append("ADD " + ", ".join(adds))
        if change.unindex:
            parts.append("REMOVE GSI1PK, GSI1SK")
        kwargs: dict[str, Any] = {
            "TableName": self.name,
            "Key": _key(pk, sk),
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
        try:
            resp = self.client.update_item(**kwargs)
        except self.client.exceptions.ConditionalCheckFailedException as exc:
            if current_on_conflict:
                current = exc.response.get("Item")
                raise ConditionFailedError(
                    f"update conflict on {pk}/{sk}", self._decode(current) if current else None
                ) from exc
            raise ConflictError(f"update conflict on {pk}/{sk}") from exc
        item = resp.get("Attributes")
        if not item:
            return None
        return self._decode(item)

    def _delete(self, pk: str, sk: str, *, condition: cond.Condition | None, return_old: bool) -> Record | None:
        kwargs: dict[str, Any] = {"TableName": self.name, "Key": _key(pk, sk)}
        _with_condition(kwargs, condition)
        if return_old:
            kwargs["ReturnValues"] = "ALL_OLD"
        try:
            resp = self.client.delete_item(**kwargs)
        except self.client.exceptions.ConditionalCheckFailedException as exc:
            raise ConflictError(f"delete conflict on {pk}/{sk}") from exc
        old = resp.get("Attributes")
        return self._decode(old) if old else None

    def _write_batch(
        self, puts: list[tuple[tuple[str, str], Mapping[str, Any]]], deletes: list[tuple[str, str]]
    ) -> None:
        requests: list[dict[str, Any]] = [
            {"PutRequest": {"Item": self._encode(pk, sk, data)}} for (pk, sk), data in puts
        ]
        requests += [{"DeleteRequest": {"Key": _key(pk, sk)}} for pk, sk in deletes]

        def send(request: dict[str, Any]) -> dict[str, Any]:
            resp = self.client.batch_write_item(RequestItems=request)
            unprocessed: dict[str, Any] = resp.get("UnprocessedItems") or {}
            return unprocessed

        for start in range(0, len(requests), 25):
            self._until_processed(send, {self.name: requests[start : start + 25]})

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

    def _delete_expired(self, now: float, limit: int | None) -> int:
        """As the port's: the expired items a scan finds, each deleted on the condition that it is still expired (on
        AWS, DynamoDB's own TTL process does this; the sweep is for tooling and tests)."""
        deleted = 0
        for pk, sk in self._expired_keys(now, limit):
            try:
                self._delete(pk, sk, condition=cond.lt("ttl", now), return_old=False)
            except ConflictError:
                continue  # written again with a later ttl since it was listed
            deleted += 1
        return deleted
