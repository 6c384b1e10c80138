"""frontends/auth without sockets: the route table covers every route and RPC, the per-request check,
the start-up policy (loopback open, exposed refused without a management key) and the settings syntax."""

from __future__ import annotations

import re

import pytest
from pydantic import SecretStr, ValidationError
from starlette.routing import Route

from servelab.config.settings import ApiGroup, AuthSettings, ServerSettings
from servelab.frontends.auth import REST_ROUTES, AuthSetupError, Level, build_door, guard_routes, is_loopback
from servelab.frontends.auth.routes import GRPC_METHODS, LEVEL, UnclassifiedRoute, rest_group
from servelab.frontends.rest import (
    oip,
    oip_extensions,
    rollouts,
    tfserving,
    torchserve,
    torchserve_management,
)
from servelab.protocol import grpc_service_pb2 as pb

MANAGEMENT = "m-" + "a" * 30
INFERENCE = "i-" + "b" * 30


def _all_routes() -> list[Route]:
    routes = [*oip.routes(), *oip_extensions.routes(), *rollouts.routes(), *tfserving.routes(), *torchserve.routes(),
              *torchserve_management.routes()]
    return [r for r in routes if isinstance(r, Route)]


def _door(**auth: object):  # type: ignore[no-untyped-def]
    return build_door(ServerSettings(auth=AuthSettings(**auth)))  # type: ignore[arg-type]


def test_every_rest_route_and_method_is_in_the_table() -> None:
    routes = _all_routes()
    assert len(routes) > 20
    for route in routes:
        for method in route.methods or {"GET"}:
            rest_group(method, route.path)  # raises UnclassifiedRoute if missing
    with pytest.raises(UnclassifiedRoute, match="POST /v2/rollouts"):
        rest_group("POST", "/v2/rollouts")


def test_every_grpc_method_of_the_services_is_in_the_table() -> None:
    service = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    names = {f"/inference.GRPCInferenceService/{m.name}" for m in service.methods}
    assert names <= set(GRPC_METHODS), sorted(names - set(GRPC_METHODS))
    assert GRPC_METHODS["/grpc.health.v1.Health/Check"] is ApiGroup.HEALTH


def test_protected_routes_are_wrapped_and_open_ones_left_alone() -> None:
    door = _door(management_key=SecretStr(MANAGEMENT))
    routes = _all_routes()
    before = {(r.path, tuple(sorted(r.methods or ()))): r.app for r in routes}
    guard_routes(routes, door)
    for route in routes:
        group = rest_group(next(iter(route.methods or {"GET"})), route.path)
        wrapped = route.app is not before[(route.path, tuple(sorted(route.methods or ())))]
        assert wrapped == (group is not None and LEVEL[group] is Level.MANAGEMENT), route.path


def test_no_door_or_nothing_to_check_wraps_nothing() -> None:
    routes = _all_routes()
    apps = [r.app for r in routes]
    guard_routes(routes, None)
    guard_routes(routes, _door())
    assert [r.app for r in routes] == apps
    assert _door().http == {} and _door().grpc == {}


def _headers(**values: str):  # type: ignore[no-untyped-def]
    return {k.replace("_", "-"): v for k, v in values.items()}.get


def test_management_requirement_refuses_missing_wrong_and_inference_keys() -> None:
    door = _door(management_key=SecretStr(MANAGEMENT), inference_key=SecretStr(INFERENCE))
    req = door.http[ApiGroup.MODEL_REPOSITORY]
    assert req.level is Level.MANAGEMENT
    missing = req.check(_headers())
    assert missing is not None and not missing.invalid_token and "Authorization: Bearer" in missing.message
    for sent in ("Bearer wrong", f"Bearer {INFERENCE}", f"Basic {MANAGEMENT}", MANAGEMENT, "Bearer"):
        denial = req.check(_headers(authorization=sent))
        assert denial is not None and denial.invalid_token and not denial.restricted, sent
    assert req.check(_headers(authorization=f"Bearer {MANAGEMENT}")) is None
    assert req.check(_headers(authorization=f"bearer  {MANAGEMENT} ")) is None


def test_inference_level_accepts_the_inference_or_the_management_key() -> None:
    door = _door(management_key=SecretStr(MANAGEMENT), inference_key=SecretStr(INFERENCE))
    for group in (ApiGroup.INFERENCE, ApiGroup.METADATA, ApiGroup.MODEL_CONFIG, ApiGroup.STATISTICS):
        req = door.grpc[group]
        assert req.check(_headers()) is not None
        assert req.check(_headers(authorization=f"Bearer {INFERENCE}")) is None
        assert req.check(_headers(authorization=f"Bearer {MANAGEMENT}")) is None
    assert ApiGroup.HEALTH not in door.http and ApiGroup.HEALTH not in door.grpc


def test_only_a_management_key_leaves_inference_open() -> None:
    door = _door(management_key=SecretStr(MANAGEMENT))
    assert ApiGroup.INFERENCE not in door.http and ApiGroup.MODEL_REPOSITORY in door.grpc


def test_restricted_groups_use_triton_headers_and_messages() -> None:
    door = _door(
        http_restricted_api=["model-repository,health:Admin-Key=admin-value"],
        grpc_restricted_protocol=["inference:infer-key=infer-value"],
    )
    http = door.http[ApiGroup.HEALTH]
    denial = http.check(_headers())
    assert denial is not None and denial.restricted
    assert denial.message == "This API is restricted, expecting header 'admin-key'"
    assert http.check(_headers(admin_key="nope")) is not None
    assert http.check(_headers(admin_key="admin-value")) is None
    grpc_req = door.grpc[ApiGroup.INFERENCE]
    assert grpc_req.header == "triton-grpc-protocol-infer-key"
    assert grpc_req.check(_headers()).message == (  # type: ignore[union-attr]
        "This protocol is restricted, expecting header 'triton-grpc-protocol-infer-key'"
    )
    assert grpc_req.check({"triton-grpc-protocol-infer-key": "infer-value"}.get) is None
    assert ApiGroup.INFERENCE not in door.http


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("inference:key", "format is '<api>[,<api>...]:<key>=<value>'"),
        ("inference,infer:k=v", "unknown restricted API 'infer'"),
        (":k=v", "format is"),
        ("inference:bad key=v", "must be letters, digits"),
    ],
)
def test_restricted_flag_syntax_errors_say_what_was_expected(flag: str, message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        AuthSettings(http_restricted_api=[flag])  # type: ignore[list-item]


def test_an_api_in_two_groups_is_refused_like_triton() -> None:
    with pytest.raises(ValidationError, match="restricted API 'health' can not be specified in multiple config groups"):
        AuthSettings(grpc_restricted_protocol=["model-repository,health:k1=v1", "metadata,health:k2=v2"])  # type: ignore[list-item]


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "example.internal"])
def test_beyond_loopback_without_a_management_key_refuses_to_start(host: str) -> None:
    assert not is_loopback(host)
    with pytest.raises(AuthSetupError, match="--disable-auth") as info:
        build_door(ServerSettings(host=host))
    assert "--key-file" in str(info.value) and "--management-key" in str(info.value)
    with pytest.raises(AuthSetupError):
        build_door(ServerSettings(host=host, auth=AuthSettings(inference_key=SecretStr(INFERENCE))))
    assert build_door(ServerSettings(host=host, auth=AuthSettings(disable_auth=True))).http == {}
    exposed = build_door(ServerSettings(host=host, auth=AuthSettings(management_key=SecretStr(MANAGEMENT))))
    assert ApiGroup.MODEL_REPOSITORY in exposed.http


def test_conflicting_auth_settings_name_both_fields(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValidationError, match="auth.key_file and auth.management_key are both set"):
        AuthSettings(key_file=tmp_path / "k.json", management_key=SecretStr(MANAGEMENT))
    with pytest.raises(ValidationError, match="disable_auth is set together with a key"):
        AuthSettings(disable_auth=True, management_key=SecretStr(MANAGEMENT))
    with pytest.raises(ValidationError, match="visible ASCII"):
        AuthSettings(management_key=SecretStr("has space"))


def test_keys_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVELAB_AUTH__MANAGEMENT_KEY", MANAGEMENT)
    monkeypatch.setenv("SERVELAB_AUTH__HTTP_RESTRICTED_API", '["statistics:stats-key=s"]')
    settings = ServerSettings()
    assert settings.auth.management_key is not None
    assert settings.auth.management_key.get_secret_value() == MANAGEMENT
    assert MANAGEMENT not in repr(settings)
    door = build_door(settings)
    assert door.http[ApiGroup.STATISTICS].header == "stats-key"


def test_table_has_no_stale_entries() -> None:
    served = {("GET" if m == "HEAD" else m, r.path) for r in _all_routes() for m in (r.methods or {"GET"})}
    served.add(("GET", "/metrics"))
    assert set(REST_ROUTES) == served
