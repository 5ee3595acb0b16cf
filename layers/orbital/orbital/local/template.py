"""Reading template.yaml: a YAML loader that understands CloudFormation's short-form tags."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class _CfnLoader(yaml.SafeLoader):
    pass


def _tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
        if suffix == "GetAtt" and isinstance(value, str):
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    return {name: value}


_CfnLoader.add_multi_constructor("!", _tag)


def load_template(path: str | Path) -> dict[str, Any]:
    with Path(path).open(encoding="utf-8") as fh:
        data = yaml.load(fh, Loader=_CfnLoader)  # a SafeLoader subclass: no arbitrary objects
    if not isinstance(data, dict) or "Resources" not in data:
        raise ValueError(f"{path} is not a CloudFormation template")
    return data


def resources_of(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {name: res for name, res in template["Resources"].items() if res.get("Type") == kind}


def table_definition(template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The one DynamoDB table: (logical id, create_table kwargs without the name)."""
    tables = resources_of(template, "AWS::DynamoDB::Table")
    if len(tables) != 1:
        raise ValueError("template must declare exactly one DynamoDB table")
    logical, res = next(iter(tables.items()))
    props = res["Properties"]
    kwargs: dict[str, Any] = {
        "AttributeDefinitions": props["AttributeDefinitions"],
        "KeySchema": props["KeySchema"],
        "BillingMode": props.get("BillingMode", "PAY_PER_REQUEST"),
    }
    if props.get("GlobalSecondaryIndexes"):
        kwargs["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
    return logical, kwargs


def ttl_attribute(template: dict[str, Any]) -> str | None:
    _, res = next(iter(resources_of(template, "AWS::DynamoDB::Table").items()))
    spec = res["Properties"].get("TimeToLiveSpecification") or {}
    return spec.get("AttributeName") if spec.get("Enabled") else None


def websocket_routes(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Route key -> {"function": logical id of the target function, "two_way": has a route response}."""
    integrations: dict[str, str] = {}
    for name, res in resources_of(template, "AWS::ApiGatewayV2::Integration").items():
        uri = res["Properties"].get("IntegrationUri")
        text = uri.get("Fn::Sub") if isinstance(uri, dict) else uri
        if isinstance(text, str) and "${" in text:
            fn = text.split("/functions/${", 1)[1].split(".Arn}", 1)[0]
            integrations[name] = fn
    with_response: set[str] = set()
    for res in resources_of(template, "AWS::ApiGatewayV2::RouteResponse").values():
        route_ref = res["Properties"].get("RouteId", {})
        if isinstance(route_ref, dict) and "Ref" in route_ref:
            with_response.add(route_ref["Ref"])
    routes: dict[str, dict[str, Any]] = {}
    for name, res in resources_of(template, "AWS::ApiGatewayV2::Route").items():
        props = res["Properties"]
        target = props.get("Target")
        text = target.get("Fn::Sub") if isinstance(target, dict) else target
        integ = text.split("${", 1)[1].rstrip("}") if isinstance(text, str) and "${" in text else None
        if integ in integrations:
            routes[props["RouteKey"]] = {"function": integrations[integ], "two_way": name in with_response}
    return routes


def functions(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Logical id -> {"code_uri", "handler"} for every serverless function."""
    out = {}
    for name, res in resources_of(template, "AWS::Serverless::Function").items():
        props = res["Properties"]
        out[name] = {"code_uri": props["CodeUri"], "handler": props["Handler"]}
    return out


def state_machines(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for name, res in resources_of(template, "AWS::Serverless::StateMachine").items():
        props = res["Properties"]
        out[name] = {
            "definition_uri": props.get("DefinitionUri"),
            "substitutions": props.get("DefinitionSubstitutions") or {},
            "type": props.get("Type", "STANDARD"),
        }
    return out


def schedules(template: dict[str, Any]) -> list[dict[str, Any]]:
    """Every schedule event on a function: {"function", "expression"}."""
    out = []
    for name, res in resources_of(template, "AWS::Serverless::Function").items():
        for event in (res["Properties"].get("Events") or {}).values():
            kind = event.get("Type")
            if kind in {"Schedule", "ScheduleV2"}:
                field = "Schedule" if kind == "Schedule" else "ScheduleExpression"
                out.append({"function": name, "expression": event["Properties"][field]})
    return out
