"""template.yaml, read the way the local gateway reads it (orbital.local.template), plus the layer's build inputs."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from orbital import settings
from orbital.local import template as tpl
from orbital.store import keys
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LAYER = ROOT / "layers" / "orbital"
# Lambda's Python runtime ships these; the layer must not carry (and shadow) its own copies.
RUNTIME_PROVIDED = {"boto3", "botocore", "s3transfer", "urllib3", "python-dateutil", "six"}
LEFT_OUT = {"cryptography"}
"""Asked for but not shipped (see layers/orbital/requirements.txt): google-auth signs with it only for service
account keys; the Gemini provider uses an API key (test_gemini_provider_runs_without_cryptography)."""
LAMBDA_MARKERS = {
    "python_version": "3.13",
    "python_full_version": "3.13.0",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "aarch64",
    "os_name": "posix",
    "extra": "",
}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return tpl.load_template(ROOT / "template.yaml")


def resource(template: dict[str, Any], logical_id: str) -> dict[str, Any]:
    return template["Resources"][logical_id]


def statements(res: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for policy in res["Properties"].get("Policies") or []:
        if isinstance(policy, dict) and "Statement" in policy:
            out.extend(policy["Statement"])
    return out


def actions(statement: dict[str, Any]) -> list[str]:
    act = statement["Action"]
    return [act] if isinstance(act, str) else list(act)


# --- WebSocket API -----------------------------------------------------------------------------------------------


def test_websocket_api_selects_routes_by_frame_type(template: dict[str, Any]) -> None:
    props = resource(template, "WebSocketApi")["Properties"]
    assert props["ProtocolType"] == "WEBSOCKET"
    assert props["RouteSelectionExpression"] == "$request.body.type"


def test_routes_and_their_functions(template: dict[str, Any]) -> None:
    assert tpl.websocket_routes(template) == {
        "$connect": {"function": "WsConnectFunction", "two_way": False},
        "$disconnect": {"function": "WsDisconnectFunction", "two_way": False},
        "req": {"function": "WsMessageFunction", "two_way": True},
        "bin": {"function": "WsMessageFunction", "two_way": True},
        "$default": {"function": "WsMessageFunction", "two_way": True},
    }


def test_two_way_routes_send_the_integration_response_back(template: dict[str, Any]) -> None:
    routes = tpl.resources_of(template, "AWS::ApiGatewayV2::Route")
    responses = tpl.resources_of(template, "AWS::ApiGatewayV2::RouteResponse")
    by_route = {res["Properties"]["RouteId"]["Ref"]: res["Properties"] for res in responses.values()}
    two_way = {name for name, res in routes.items() if res["Properties"]["RouteKey"] in {"req", "bin", "$default"}}
    assert set(by_route) == two_way
    for name in two_way:
        assert routes[name]["Properties"]["RouteResponseSelectionExpression"] == "$default"
        assert by_route[name]["RouteResponseKey"] == "$default"


def test_api_gateway_may_invoke_each_websocket_function(template: dict[str, Any]) -> None:
    permissions = tpl.resources_of(template, "AWS::Lambda::Permission")
    allowed = {p["Properties"]["FunctionName"]["Ref"] for p in permissions.values()}
    assert {route["function"] for route in tpl.websocket_routes(template).values()} <= allowed
    for perm in permissions.values():
        assert perm["Properties"]["Principal"] == "apigateway.amazonaws.com"
        assert "${WebSocketApi}" in perm["Properties"]["SourceArn"]["Fn::Sub"]


# --- functions ---------------------------------------------------------------------------------------------------


def test_functions_point_at_their_entry_points(template: dict[str, Any]) -> None:
    found = tpl.functions(template)
    for logical_id, name in {
        "WsConnectFunction": "ws_connect",
        "WsDisconnectFunction": "ws_disconnect",
        "WsMessageFunction": "ws_message",
        "RestApiFunction": "rest_api",
        "ChannelWebhookFunction": "channel_webhook",
        "SchedulerTickFunction": "scheduler_tick",
    }.items():
        assert found[logical_id] == {"code_uri": f"functions/{name}/", "handler": f"{name}.lambda_handler"}
    for logical_id, spec in found.items():
        module, func = spec["handler"].rsplit(".", 1)
        source = ROOT / spec["code_uri"] / f"{module}.py"
        assert source.is_file(), logical_id
        defined = {n.name for n in ast.parse(source.read_text()).body if isinstance(n, ast.FunctionDef)}
        assert func in defined, logical_id


def test_globals_runtime_architecture_layer_and_powertools(template: dict[str, Any]) -> None:
    fn = template["Globals"]["Function"]
    assert fn["Runtime"] == "python3.13"
    assert fn["Architectures"] == ["arm64"]
    assert {"Ref": "OrbitalLayer"} in fn["Layers"]
    # tracing follows one parameter (Active by default): functions, their Powertools tracer and the state machines
    assert template["Parameters"]["TracingMode"]["Default"] == "Active"
    assert fn["Tracing"] == {"Ref": "TracingMode"}
    assert fn["Environment"]["Variables"]["POWERTOOLS_TRACE_DISABLED"] == {"Fn::If": ["TracingOn", "false", "true"]}
    machines = [r for r in template["Resources"].values() if r["Type"] == "AWS::Serverless::StateMachine"]
    assert machines and all(
        m["Properties"]["Tracing"]["Enabled"] == {"Fn::If": ["TracingOn", True, False]} for m in machines
    )
    assert fn["Timeout"] <= 29  # API Gateway's integration timeout
    assert fn["LoggingConfig"]["LogFormat"] == "JSON"
    env = fn["Environment"]["Variables"]
    assert env["POWERTOOLS_SERVICE_NAME"] == "orbital"
    assert env["POWERTOOLS_METRICS_NAMESPACE"]
    assert env["POWERTOOLS_LOG_LEVEL"] == {"Ref": "LogLevel"}
    assert fn["LoggingConfig"]["ApplicationLogLevel"] == {"Ref": "LogLevel"}


def test_deployment_always_requires_the_gateway_token(template: dict[str, Any]) -> None:
    param = template["Parameters"]["GatewayAuthToken"]
    assert param["NoEcho"] is True
    assert param["MinLength"] >= 16
    assert "Default" not in param  # no token, no deployment
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    assert env[settings.ENV_REQUIRE_TOKEN] == "true"
    # the token goes into a secret; functions know only where it is
    assert settings.ENV_AUTH_TOKEN not in env
    assert env[settings.ENV_AUTH_TOKEN_SECRET] == {"Ref": "GatewayTokenSecret"}
    secret = template["Resources"]["GatewayTokenSecret"]
    assert secret["Type"] == "AWS::SecretsManager::Secret"
    assert secret["Properties"]["SecretString"] == {"Ref": "GatewayAuthToken"}
    for logical_id, res in tpl.resources_of(template, "AWS::Serverless::Function").items():
        assert settings.ENV_AUTH_TOKEN not in ((res["Properties"].get("Environment") or {}).get("Variables") or {})
        readers = [p for p in res["Properties"].get("Policies", []) if "AWSSecretsManagerGetSecretValuePolicy" in p]
        # only the functions that check tokens (`connect` and dialects' tokens; a bearer at the upgrade; the HTTP
        # API's bearer) may read it
        assert readers == (
            [{"AWSSecretsManagerGetSecretValuePolicy": {"SecretArn": {"Ref": "GatewayTokenSecret"}}}]
            if logical_id in ("WsMessageFunction", "WsConnectFunction", "RestApiFunction")
            else []
        ), logical_id


def test_every_orbital_variable_in_the_template_is_one_the_code_reads(template: dict[str, Any]) -> None:
    known = {value for name, value in vars(settings).items() if name.startswith("ENV_")}
    envs = [template["Globals"]["Function"]["Environment"]["Variables"]]
    for res in tpl.resources_of(template, "AWS::Serverless::Function").values():
        envs.append(((res["Properties"].get("Environment") or {}).get("Variables")) or {})
    used = {name for env in envs for name in env if name.startswith("ORBITAL_")}
    assert used, "no ORBITAL_* variables found"
    assert used <= known, used - known


# --- state -------------------------------------------------------------------------------------------------------


def test_table_keys_index_ttl_and_protection(template: dict[str, Any]) -> None:
    logical, kwargs = tpl.table_definition(template)
    assert logical == "StateTable"
    assert kwargs["BillingMode"] == "PAY_PER_REQUEST"
    assert kwargs["KeySchema"] == [
        {"AttributeName": "PK", "KeyType": "HASH"},
        {"AttributeName": "SK", "KeyType": "RANGE"},
    ]
    (gsi,) = kwargs["GlobalSecondaryIndexes"]
    assert gsi["IndexName"] == keys.GSI1
    assert gsi["KeySchema"] == [
        {"AttributeName": "GSI1PK", "KeyType": "HASH"},
        {"AttributeName": "GSI1SK", "KeyType": "RANGE"},
    ]
    assert gsi["Projection"] == {"ProjectionType": "ALL"}
    # DynamoDB rejects attribute definitions that no key uses
    defined = {a["AttributeName"] for a in kwargs["AttributeDefinitions"]}
    assert defined == {"PK", "SK", "GSI1PK", "GSI1SK"}
    assert tpl.ttl_attribute(template) == "ttl"
    table = resource(template, "StateTable")
    assert table["Properties"]["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert table["DeletionPolicy"] == table["UpdateReplacePolicy"] == "Retain"


def test_bucket_is_private_encrypted_and_retained(template: dict[str, Any]) -> None:
    bucket = resource(template, "WorkspaceBucket")
    props = bucket["Properties"]
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    (rule,) = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in {"AES256", "aws:kms"}
    assert bucket["DeletionPolicy"] == bucket["UpdateReplacePolicy"] == "Retain"


def test_table_and_bucket_keep_what_a_restore_needs(template: dict[str, Any]) -> None:
    """The README's restore on AWS relies on both: the table's point-in-time recovery (35 days) and the bucket's
    object versions, with an old version kept as long as the README says (30 days)."""
    table = resource(template, "StateTable")["Properties"]
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    bucket = resource(template, "WorkspaceBucket")["Properties"]
    assert bucket["VersioningConfiguration"] == {"Status": "Enabled"}
    rules = {rule["Id"]: rule for rule in bucket["LifecycleConfiguration"]["Rules"]}
    kept = rules["expire-old-versions"]
    assert kept["Status"] == "Enabled"
    assert kept["NoncurrentVersionExpiration"] == {"NoncurrentDays": 30}
    readme = (ROOT / "README.md").read_text()
    assert "old versions of its objects for 30 days" in readme


# --- IAM ---------------------------------------------------------------------------------------------------------


def test_no_wildcard_actions_and_data_scoped_to_our_table_and_bucket(template: dict[str, Any]) -> None:
    for logical_id, res in tpl.resources_of(template, "AWS::Serverless::Function").items():
        for st in statements(res):
            for action in actions(st):
                assert "*" not in action, f"{logical_id}: {action}"
            text = json.dumps(st["Resource"])
            if any(a.startswith("dynamodb:") for a in actions(st)):
                assert "StateTable" in text, logical_id
            if any(a.startswith("s3:") for a in actions(st)):
                assert "WorkspaceBucket" in text, logical_id


def test_connect_function_may_only_arm_authentication_deadlines(template: dict[str, Any]) -> None:
    """`$connect` reads only install identities (a WindieOS install token) and device tokens (noting a device
    token's last use on its record); it writes only a new socket's authentication deadline (a pending call under the
    `auth-` call ids, and a due marker), the record of a socket that showed a credential, and a device token's socket
    entry, and starts the timer of its second."""
    from orbital.engines import socket_gate
    from orbital.store import keys

    found = statements(resource(template, "WsConnectFunction"))
    granted = {a: st for st in found for a in actions(st)}
    assert set(granted) == {"dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:UpdateItem", "states:StartExecution"}
    readable = granted["dynamodb:GetItem"]["Condition"]["ForAllValues:StringEquals"]["dynamodb:LeadingKeys"]
    assert readable == [keys.install("HASH")[0], keys.device("ID")[0]]
    updated = granted["dynamodb:UpdateItem"]["Condition"]["ForAllValues:StringEquals"]["dynamodb:LeadingKeys"]
    assert updated == [keys.device("ID")[0]]
    leading = granted["dynamodb:PutItem"]["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]
    deadline_pk = keys.pending_call(socket_gate.call_id("SOCKET="))[0]
    due_pk = keys.call_due_pk(1_800_000_000)
    connection_pk = keys.connection("SOCKET=")[0]
    device_socket_pk = keys.device_sockets_pk("ID")
    expected = [
        deadline_pk.replace("SOCKET=", "*"),
        due_pk.replace("1800000000", "*"),
        connection_pk.replace("SOCKET=", "*"),
        device_socket_pk.replace("ID", "*"),
    ]
    assert sorted(leading) == sorted(expected)
    # and it may read the token (a bearer at the upgrade), nothing else
    policies = resource(template, "WsConnectFunction")["Properties"]["Policies"]
    assert {"AWSSecretsManagerGetSecretValuePolicy": {"SecretArn": {"Ref": "GatewayTokenSecret"}}} in policies
    assert granted["states:StartExecution"]["Resource"]["Fn::Sub"].endswith(
        ":stateMachine:${AWS::StackName}-deferred-call"
    )


def test_the_http_api_may_do_what_a_client_socket_may_and_no_more(template: dict[str, Any]) -> None:
    """The admin API calls the same handlers as ws_message (ADR 0029): the same statements, so neither can drift;
    media (`media/*`: uploads, the media route's reads and expiry deletes) is within the workspace objects."""
    rest = resource(template, "RestApiFunction")["Properties"]
    assert rest["Policies"] == resource(template, "WsMessageFunction")["Properties"]["Policies"]
    granted = {a: st for st in statements(resource(template, "RestApiFunction")) for a in actions(st)}
    assert {"s3:GetObject", "s3:PutObject", "s3:DeleteObject"} <= set(granted)
    assert granted["s3:PutObject"]["Resource"] == {"Fn::Sub": "${WorkspaceBucket.Arn}/*"}
    assert not any(a.startswith(("bedrock:", "transcribe:", "lambda:")) for a in granted)


def test_the_http_function_waits_within_its_timeout(template: dict[str, Any]) -> None:
    from orbital.rest import admin

    props = resource(template, "RestApiFunction")["Properties"]
    timeout = props.get("Timeout", template["Globals"]["Function"]["Timeout"])
    assert admin.WAIT_SECONDS + admin.LAMBDA_MARGIN_SECONDS <= timeout <= 29  # API Gateway's integration timeout
    assert props["MemorySize"] >= 1024  # FastAPI and the registry load at its first request


def _http_routes(template: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(function, path, method) of every HttpApi event."""
    found = []
    for logical_id, res in tpl.resources_of(template, "AWS::Serverless::Function").items():
        for event in (res["Properties"].get("Events") or {}).values():
            if event["Type"] == "HttpApi":
                assert event["Properties"]["ApiId"] == {"Ref": "HttpApi"}
                found.append((logical_id, event["Properties"]["Path"], event["Properties"]["Method"]))
    return found


def _route_for(routes: list[tuple[str, str, str]], method: str, path: str) -> str | None:
    """The function API Gateway's HTTP API picks for a request: an exact path before a greedy `{proxy+}`, the longest
    greedy prefix first, a route of the method before ANY."""
    best: tuple[tuple[int, int, int], str] | None = None
    for function, route, verb in routes:
        if verb not in ("ANY", method):
            continue
        if route.endswith("/{proxy+}"):
            prefix = route[: -len("{proxy+}")]
            if not path.startswith(prefix) or path == prefix:
                continue
            rank = (0, len(prefix), verb != "ANY")
        elif route == path:
            rank = (1, len(route), verb != "ANY")
        else:
            continue
        if best is None or rank > best[0]:
            best = (rank, function)
    return best[1] if best else None


def test_every_route_of_the_app_reaches_a_function_serving_it(template: dict[str, Any]) -> None:
    from tests.support.http_routes import app_routes, probe_path

    routes = _http_routes(template)
    assert _route_for(routes, "GET", "/") == "RestApiFunction"  # the console's page
    for method, path in app_routes():
        expected = "ChannelWebhookFunction" if path.startswith("/channels/") else "RestApiFunction"
        assert _route_for(routes, method, probe_path(path)) == expected, (method, path)
    for path in ("/api/v1/config.get", "/api/artifacts/", "/media/ab-12.png", "/docs", "/openapi.json"):
        assert _route_for(routes, "POST" if path.startswith("/api/") else "GET", path) == "RestApiFunction"


def test_manage_connections_is_scoped_to_this_api_and_stage(template: dict[str, Any]) -> None:
    posting = set()
    for logical_id, res in tpl.resources_of(template, "AWS::Serverless::Function").items():
        for st in statements(res):
            if "execute-api:ManageConnections" in actions(st):
                posting.add(logical_id)
                arn = st["Resource"]["Fn::Sub"]
                assert arn.endswith(":${WebSocketApi}/${Stage}/*/@connections/*"), logical_id
    assert {"WsMessageFunction", "WsDisconnectFunction", "ChannelWebhookFunction", "SchedulerTickFunction"} <= posting
    assert "RestApiFunction" in posting  # the admin API's methods post to nodes and channels
    assert "WsConnectFunction" not in posting


# --- layer -------------------------------------------------------------------------------------------------------


def test_layer_is_built_by_its_makefile_for_python313_arm64(template: dict[str, Any]) -> None:
    layer = resource(template, "OrbitalLayer")
    assert layer["Type"] == "AWS::Serverless::LayerVersion"
    assert layer["Metadata"]["BuildMethod"] == "makefile"
    assert layer["Properties"]["ContentUri"] == "layers/orbital/"
    assert layer["Properties"]["CompatibleRuntimes"] == ["python3.13"]
    assert layer["Properties"]["CompatibleArchitectures"] == ["arm64"]
    makefile = (LAYER / "Makefile").read_text()
    assert re.search(r"^build-OrbitalLayer:", makefile, re.MULTILINE)
    for flag in ("--platform", "--implementation cp", "--python-version", "--only-binary=:all:", "--target"):
        assert flag in makefile, flag
    assert "manylinux2014_aarch64" in makefile
    assert "LAYER_PYTHON_VERSION ?= 3.13" in makefile


def _pins() -> dict[str, str]:
    pins = {}
    for line in (LAYER / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", line
            pins[canonicalize_name(req.name)] = spec.version
    return pins


def test_layer_pins_are_what_the_tests_run() -> None:
    pins = _pins()
    for top in ("pydantic", "aws-lambda-powertools", "anthropic", "openai", "google-genai"):
        assert top in pins, top
    assert not set(pins) & RUNTIME_PROVIDED
    for name, version in pins.items():
        assert importlib.metadata.version(name) == version, name


def test_layer_pins_are_a_complete_set() -> None:
    """The layer installs with --no-deps, so every dependency (on Lambda: Linux, aarch64, 3.13) must be pinned."""
    pins = _pins()
    missing = set()
    for name in pins:
        for text in importlib.metadata.requires(name) or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate(LAMBDA_MARKERS):
                continue
            dep = canonicalize_name(req.name)
            if dep not in pins and dep not in RUNTIME_PROVIDED and dep not in LEFT_OUT:
                missing.add(f"{dep} (needed by {name})")
    assert not missing, sorted(missing)
    assert not set(pins) & LEFT_OUT


def test_gemini_provider_runs_without_cryptography() -> None:
    """The layer leaves cryptography out: the Gemini provider's tests pass with it unimportable."""
    blocker = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('cryptography', 'cffi', '_cffi_backend'):\n"
        "            raise ImportError('not in the layer: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import pytest\n"
        "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-k', 'google', 'tests/unit/test_providers.py']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", blocker], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert re.search(r"\b([1-9][0-9]*) passed", done.stdout), done.stdout[-2000:]


# --- state machines ----------------------------------------------------------------------------------------------


def test_state_machines_exist_and_every_substitution_is_defined(template: dict[str, Any]) -> None:
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser

    machines = tpl.state_machines(template)
    for logical_id, spec in machines.items():
        path = ROOT / spec["definition_uri"]
        assert path.is_file(), logical_id
        text = path.read_text()
        wanted = set(re.findall(r"\$\{([A-Za-z0-9_]+)\}", text))
        assert wanted == set(spec["substitutions"]), logical_id
        for name in wanted:
            text = text.replace("${" + name + "}", f"arn:aws:lambda:us-east-1:123456789012:function:{name}")
        definition = json.loads(text)
        assert definition.get("QueryLanguage", "JSONPath") == "JSONPath", logical_id  # moto runs JSONPath only
        AmazonStateLanguageParser.parse(text)


# --- outputs -----------------------------------------------------------------------------------------------------


def test_outputs_give_the_wss_and_https_urls(template: dict[str, Any]) -> None:
    outputs = template["Outputs"]
    ws = outputs["WebSocketUrl"]["Value"]["Fn::Sub"]
    http = outputs["HttpApiUrl"]["Value"]["Fn::Sub"]
    assert ws.startswith("wss://${WebSocketApi}.execute-api.") and ws.endswith("/${Stage}")
    assert http.startswith("https://${HttpApi}.execute-api.")


# --- the agent -----------------------------------------------------------------------------------------------------


def test_agent_turn_runs_on_its_own_step_function(template: dict[str, Any]) -> None:
    machine = resource(template, "AgentTurnStateMachine")["Properties"]
    assert machine["Type"] == "STANDARD"  # waitForTaskToken needs Standard
    assert machine["DefinitionUri"] == "statemachines/agent_turn.asl.json"
    assert machine["DefinitionSubstitutions"] == {
        "AgentStepsFunctionArn": {"Fn::GetAtt": ["AgentStepsFunction", "Arn"]}
    }
    steps = resource(template, "AgentStepsFunction")["Properties"]
    assert steps["Handler"] == "agent_steps.lambda_handler"
    assert steps["Timeout"] == 900  # a model call may take timeouts.llmMs (5 min by default) and compaction more
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    assert "${AWS::StackName}-agent-turn" in env["ORBITAL_AGENT_TURN_ARN"]["Fn::Sub"]
    assert env["ORBITAL_DEFAULT_MODEL"] == {"Ref": "DefaultModel"}
    assert template["Parameters"]["DefaultModel"]["Default"].startswith("bedrock/")


def test_only_the_agent_steps_may_call_bedrock(template: dict[str, Any]) -> None:
    callers = set()
    for logical_id, res in tpl.resources_of(template, "AWS::Serverless::Function").items():
        for st in statements(res):
            if any(a.startswith("bedrock:") for a in actions(st)):
                callers.add(logical_id)
                assert set(actions(st)) == {"bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream"}
    assert callers == {"AgentStepsFunction"}


def test_functions_that_start_or_stop_runs_may_do_so(template: dict[str, Any]) -> None:
    def granted(logical_id: str) -> set[str]:
        return {a for st in statements(resource(template, logical_id)) for a in actions(st)}

    assert {"states:StartExecution", "states:StopExecution", "states:DescribeExecution"} <= granted("WsMessageFunction")
    assert {"states:StartExecution", "states:SendTaskSuccess"} <= granted("AgentStepsFunction")
    for logical_id in ("ChannelWebhookFunction", "SchedulerTickFunction"):  # they start runs and stop timed-out ones
        assert {"states:StartExecution", "states:StopExecution", "states:DescribeExecution"} <= granted(logical_id)


def test_both_http_functions_serve_the_one_app(template: dict[str, Any]) -> None:
    events = resource(template, "ChannelWebhookFunction")["Properties"]["Events"]
    assert [(e["Type"], e["Properties"]["Path"], e["Properties"]["Method"]) for e in events.values()] == [
        ("HttpApi", "/channels/{proxy+}", "POST")
    ]
    for name in ("channel_webhook", "rest_api"):
        source = (ROOT / "functions" / name / f"{name}.py").read_text()
        assert "from orbital.rest.app import lambda_handler as serve" in source, name
        assert not re.search(r"^\s*(from|import) (fastapi|mangum)", source, re.MULTILINE), name  # loaded at first use


def test_the_scheduler_ticks_every_minute(template: dict[str, Any]) -> None:
    assert tpl.schedules(template) == [{"function": "SchedulerTickFunction", "expression": "rate(1 minute)"}]
    (event,) = resource(template, "SchedulerTickFunction")["Properties"]["Events"].values()
    assert event["Properties"]["RetryPolicy"] == {"MaximumRetryAttempts": 0}  # the next tick is the retry


def test_only_the_agent_steps_may_transcribe(template: dict[str, Any]) -> None:
    callers = {
        logical_id
        for logical_id, res in tpl.resources_of(template, "AWS::Serverless::Function").items()
        for st in statements(res)
        if any(a.startswith("transcribe:") for a in actions(st))
    }
    assert callers == {"AgentStepsFunction"}


def test_agent_turn_state_machine_catches_every_failure() -> None:
    definition = json.loads((ROOT / "statemachines" / "agent_turn.asl.json").read_text())
    for name, state in definition["States"].items():
        if state["Type"] != "Task" or name == "Fail":
            continue
        catches = [c for catch in state.get("Catch", []) for c in catch["ErrorEquals"]]
        assert "States.ALL" in catches, name
        assert state.get("Retry"), name
    assert definition["States"]["AwaitTools"]["TimeoutSecondsPath"] == "$.waitSeconds"


def test_the_local_host_calls_each_handler_without_its_lambda_decorators(template: dict[str, Any]) -> None:
    """Locally the logger context, metric flush and tracing are no-ops; the handler's own body is what runs."""
    from orbital.local.stack import FunctionHost

    host = FunctionHost(ROOT, template)
    for logical_id in host.specs:
        handler = host._load(logical_id)
        assert not hasattr(handler, "__wrapped__"), logical_id
        assert handler.__name__ == "lambda_handler" and handler.__module__.startswith("orbital_fn_")


DATA_ACTIONS = {
    # what each reaches (ports.lifecycle and the families' hooks; scheduler.tick; the inbound pipeline)
    "WsDisconnectFunction": {
        "dynamodb:GetItem",
        "dynamodb:BatchGetItem",
        "dynamodb:Query",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "s3:DeleteObject",
        "s3:ListBucket",
    },
    "SchedulerTickFunction": {
        "dynamodb:GetItem",
        "dynamodb:BatchGetItem",
        "dynamodb:Query",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:BatchWriteItem",
        "s3:GetObject",
        "s3:DeleteObject",
        "s3:ListBucket",
    },
    "ChannelWebhookFunction": {
        "dynamodb:GetItem",
        "dynamodb:BatchGetItem",
        "dynamodb:Query",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:BatchWriteItem",
        "s3:GetObject",
        "s3:PutObject",
        "s3:DeleteObject",
        "s3:ListBucket",
    },
}


@pytest.mark.parametrize("logical_id", sorted(DATA_ACTIONS))
def test_functions_get_only_the_table_and_bucket_actions_they_use(template: dict[str, Any], logical_id: str) -> None:
    """No transaction is ever written (ConditionCheckItem); `$disconnect` writes no message and no object, only
    removes a failed transfer's staging objects; the tick reads and removes objects but writes none."""
    granted = {
        action
        for st in statements(resource(template, logical_id))
        for action in actions(st)
        if action.startswith(("dynamodb:", "s3:"))
    }
    assert granted == DATA_ACTIONS[logical_id]
