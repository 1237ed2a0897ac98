"""docs/api/openapi.yaml stays true: it lists exactly the routes suanlid serves
(`suanlid --print-routes`), it is well-formed, and live answers of a real
server match its schemas (checked by the small validator below, since
python3-jsonschema may be absent)."""
import base64
import hashlib
import hmac
import json
import os
import re
import struct
import subprocess
import time
import uuid

import pytest
import yaml

from conftest import PASSWORD, ROOT, SUANLID, unique_email

SPEC_PATH = os.path.join(ROOT, "docs", "api", "openapi.yaml")
ROUTES_C = os.path.join(ROOT, "server", "routes.c")
METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")


@pytest.fixture(scope="module")
def spec():
    with open(SPEC_PATH) as f:
        return yaml.safe_load(f)


def served_routes():
    out = subprocess.run([SUANLID, "--print-routes"], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    routes = set()
    for line in out.splitlines():
        if line.strip():
            method, path = line.split()
            routes.add((method.upper(), path))
    return routes


def documented_routes(spec):
    return {(m.upper(), p) for p, item in spec["paths"].items() for m in item if m in METHODS}


def operations(spec):
    for p, item in spec["paths"].items():
        for m, op in item.items():
            if m in METHODS:
                yield m.upper(), p, item, op


def resolve(spec, node):
    """Follows $ref (local only) until a node without one."""
    seen = 0
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/"), f"non-local $ref {ref}"
        node = spec
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            assert isinstance(node, dict) and part in node, f"unresolvable $ref {ref}"
            node = node[part]
        seen += 1
        assert seen < 20, f"$ref loop at {ref}"
    return node


def route_flags():
    """{(METHOD, path): set of flags} from the route table's source."""
    src = open(ROUTES_C).read()
    rows = re.findall(r'R\("(\w+)",\s*"([^"]+)",\s*\w+,\s*([^)]*)\)', src)
    return {(m, p): set(re.findall(r"API_\w+", f)) for m, p, f in rows}


# --- (a) the route set ------------------------------------------------------

def test_spec_lists_exactly_the_served_routes(spec):
    served, documented = served_routes(), documented_routes(spec)
    missing = sorted(served - documented)
    extra = sorted(documented - served)
    assert not missing and not extra, (
        "openapi.yaml and `suanlid --print-routes` disagree:\n"
        f"  served but not documented: {missing}\n"
        f"  documented but not served: {extra}")


def test_route_table_source_matches_print_routes():
    # route_flags() parses routes.c; make sure that parse is complete
    assert set(route_flags()) == served_routes()


# --- (b) the document's shape ------------------------------------------------

def test_document_shape(spec):
    assert str(spec.get("openapi", "")).startswith("3.0"), "must be OpenAPI 3.0.x"
    for key in ("title", "version", "description"):
        assert spec["info"].get(key), f"info.{key} missing"
    for word in ("Authentication", "Errors", "Idempotency", "Pagination", "micros"):
        assert word in spec["info"]["description"], f"top-level description lacks {word}"
    schemes = spec["components"]["securitySchemes"]
    assert any(s.get("scheme") == "bearer" for s in schemes.values())
    assert any(s.get("in") == "cookie" and s.get("name") == "suanli_session"
               for s in schemes.values())
    problems = []
    for method, path, item, op in operations(spec):
        where = f"{method} {path}"
        for key in ("summary", "description", "responses"):
            if not op.get(key):
                problems.append(f"{where}: no {key}")
        codes = [str(c) for c in op.get("responses", {})]
        if not any(c.startswith("2") for c in codes):
            problems.append(f"{where}: no 2xx response")
        params = [resolve(spec, p) for p in item.get("parameters", []) + op.get("parameters", [])]
        declared = {p["name"] for p in params if p.get("in") == "path"}
        wanted = set(re.findall(r"\{(\w+)\}", path))
        if declared != wanted:
            problems.append(f"{where}: path params {sorted(wanted)} declared {sorted(declared)}")
        for p in params:
            if p.get("in") == "path" and not p.get("required"):
                problems.append(f"{where}: path param {p['name']} not required")
        for code, r in op.get("responses", {}).items():
            r = resolve(spec, r)
            if str(code).startswith(("4", "5")):
                schema = r.get("content", {}).get("application/json", {}).get("schema")
                if not schema or resolve(spec, schema) is not resolve(
                        spec, {"$ref": "#/components/schemas/Error"}):
                    problems.append(f"{where}: {code} does not use the Error schema")
        body = op.get("requestBody")
        content = resolve(spec, body)["content"] if body else {}
        if body and "application/octet-stream" in content:
            # an upload: the body is a file, not an object
            if list(content) != ["application/octet-stream"]:
                problems.append(f"{where}: an upload takes only application/octet-stream")
        elif body:
            schema = resolve(spec, content["application/json"]["schema"])
            if schema.get("additionalProperties") is not False:
                problems.append(f"{where}: request body allows unknown fields")
    assert not problems, "\n".join(problems)


def test_every_ref_resolves(spec):
    bad = []

    def walk(node, where):
        if isinstance(node, dict):
            if "$ref" in node:
                try:
                    resolve(spec, node)
                except AssertionError as e:
                    bad.append(f"{where}: {e}")
            for k, v in node.items():
                walk(v, f"{where}/{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{where}/{i}")

    walk(spec, "#")
    assert not bad, "\n".join(bad)


SCHEMA_KEYWORDS = {
    "$ref", "type", "format", "description", "example", "default", "enum", "nullable",
    "required", "properties", "additionalProperties", "items", "allOf", "oneOf", "anyOf",
    "minimum", "maximum", "minLength", "maxLength", "pattern", "minItems", "maxItems",
    "readOnly", "writeOnly", "deprecated", "title"}


def test_schemas_use_only_known_keywords(spec):
    """Catches YAML slips such as an unquoted comma in a flow mapping, which
    silently turns text into a bogus key."""
    bad = []

    def check_schema(node, where):
        if not isinstance(node, dict):
            bad.append(f"{where}: a schema must be a mapping")
            return
        for k, v in node.items():
            if k not in SCHEMA_KEYWORDS or v is None:
                bad.append(f"{where}: unexpected {k!r}: {v!r}")
        for name, sub in (node.get("properties") or {}).items():
            check_schema(sub, f"{where}.{name}")
        for k in ("items", "additionalProperties"):
            if isinstance(node.get(k), dict):
                check_schema(node[k], f"{where}/{k}")
        for k in ("allOf", "oneOf", "anyOf"):
            for i, sub in enumerate(node.get(k, [])):
                check_schema(sub, f"{where}/{k}[{i}]")

    def walk(node, where):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "schema":
                    check_schema(v, f"{where}/schema")
                elif k == "schemas" and where == "#/components":
                    for name, sub in v.items():
                        check_schema(sub, f"{where}/schemas/{name}")
                else:
                    walk(v, f"{where}/{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{where}/{i}")

    walk(spec, "#")
    assert not bad, "\n".join(bad)


def test_flags_match_the_document(spec):
    """Public routes need no security; POSTs that honour Idempotency-Key
    declare it, the others do not; admin routes live under /v1/admin."""
    flags = route_flags()
    problems = []
    for method, path, item, op in operations(spec):
        f = flags.get((method, path), set())
        where = f"{method} {path}"
        public = op.get("security", spec.get("security")) == []
        if public != ("API_PUBLIC" in f):
            problems.append(f"{where}: public is {public} in the document")
        names = {resolve(spec, p).get("name") for p in op.get("parameters", [])}
        wants_key = method == "POST" and "API_NO_IDEMPOTENCY" not in f
        if ("Idempotency-Key" in names) != wants_key:
            problems.append(f"{where}: Idempotency-Key declared {not wants_key}")
        if ("API_ADMIN" in f) != path.startswith("/v1/admin/"):
            problems.append(f"{where}: admin flag and path disagree")
        if "Admin" not in op["description"] and "API_ADMIN" in f:
            problems.append(f"{where}: description does not say admins only")
    assert not problems, "\n".join(problems)


def test_list_routes_take_limit_and_cursor(spec):
    for method, path, item, op in operations(spec):
        names = {resolve(spec, p).get("name") for p in op.get("parameters", [])}
        if "limit" not in names:
            continue
        assert "cursor" in names, f"{method} {path}: limit without cursor"
        schema = resolve(spec, op["responses"]["200"]["content"]["application/json"]["schema"])
        assert {"items", "next_cursor"} <= set(schema["properties"]), f"{method} {path}"


# --- the validator -------------------------------------------------------------

TIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
}


def validate(spec, schema, value, where="$"):
    """The errors of value against an OpenAPI 3.0 schema, as a list."""
    schema = resolve(spec, schema)
    if value is None:
        return [] if schema.get("nullable") else [f"{where}: null but not nullable"]
    errors = []
    for sub in schema.get("allOf", []):
        errors += validate(spec, sub, value, where)
    if "oneOf" in schema:
        n = sum(not validate(spec, s, value, where) for s in schema["oneOf"])
        if n != 1:
            errors.append(f"{where}: matches {n} of oneOf")
    t = schema.get("type")
    if t and not TYPES[t](value):
        return errors + [f"{where}: {type(value).__name__} {value!r:.60} is not {t}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} not in {schema['enum']}")
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{where}: {value!r} does not match {schema['pattern']}")
        if schema.get("format") == "date-time" and not TIME_RE.match(value):
            errors.append(f"{where}: {value!r} is not an RFC 3339 time")
        if len(value.encode()) > schema.get("maxLength", float("inf")):
            errors.append(f"{where}: longer than {schema['maxLength']}")
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{where}: shorter than {schema['minLength']}")
    if TYPES["number"](value):
        if value < schema.get("minimum", float("-inf")):
            errors.append(f"{where}: {value} < {schema['minimum']}")
        if value > schema.get("maximum", float("inf")):
            errors.append(f"{where}: {value} > {schema['maximum']}")
        if schema.get("format") == "int64" and not -2**63 <= value < 2**63:
            errors.append(f"{where}: {value} is not int64")
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            errors += validate(spec, schema["items"], v, f"{where}[{i}]")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                errors.append(f"{where}: required {name!r} missing")
        for name, v in value.items():
            if name in props:
                errors += validate(spec, props[name], v, f"{where}.{name}")
            elif schema.get("additionalProperties") is False:
                errors.append(f"{where}: undocumented field {name!r}")
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += validate(spec, schema["additionalProperties"], v, f"{where}.{name}")
    return errors


def response_schema(spec, method, path, status):
    op = spec["paths"][path][method.lower()]
    r = op["responses"].get(str(status)) or op["responses"].get(status)
    assert r is not None, f"{method} {path}: status {status} is not documented"
    r = resolve(spec, r)
    return r["content"]["application/json"]["schema"]


def check(spec, r, method, path, status, template=None):
    """Asserts r has status and a body valid against the documented schema;
    template is the route's path template when path has values in it."""
    assert r.status == status, f"{method} {path}: {r}"
    errors = validate(spec, response_schema(spec, method, template or path, status), r.json)
    assert not errors, f"{method} {path} {status}:\n" + "\n".join(errors) + f"\n{r.body[:2000]}"
    return r.json


def test_validator_catches_mistakes(spec):
    user = {"$ref": "#/components/schemas/User"}
    good = {"id": "u-abcdefghijkm", "email": "a@b.c", "name": "", "role": "renter",
            "verification": "none", "created_at": "2025-01-01T00:00:00Z",
            "can_start_instances": False}
    assert validate(spec, user, good) == []
    assert validate(spec, user, {**good, "extra": 1})
    assert validate(spec, user, {k: v for k, v in good.items() if k != "email"})
    assert validate(spec, user, {**good, "role": "root"})
    assert validate(spec, user, {**good, "id": "tok-abcdefghijkm"})
    assert validate(spec, user, {**good, "created_at": "yesterday"})
    assert validate(spec, user, {**good, "can_start_instances": 0})
    assert validate(spec, user, None)
    tok = {"$ref": "#/components/schemas/TokenCreated"}
    t = {"id": "tok-abcdefghijkm", "kind": "api", "name": "x", "token": "sl_x", "hint": "sl_x",
         "created_at": "2025-01-01T00:00:00Z", "expires_at": None}
    assert validate(spec, tok, t) == []
    assert validate(spec, tok, {**t, "expires_at": 5})
    assert validate(spec, {"$ref": "#/components/schemas/Balance"},
                    {"balance_micros": 1.5, "currency": "CNY", "spend_per_hour_micros": 0,
                     "covers_seconds": None})


# --- (c) and (d): live answers ------------------------------------------------

def cn_id_number(prefix="11010519491231002"):
    weights = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
    return prefix + "10X98765432"[sum(int(c) * w for c, w in zip(prefix, weights)) % 11]


def ed25519_line(comment="test@t101"):
    def s(b):
        return struct.pack(">I", len(b)) + b
    blob = s(b"ssh-ed25519") + s(os.urandom(32))
    return f"ssh-ed25519 {base64.b64encode(blob).decode()} {comment}"


def plain_get_routes(spec, admin):
    """JSON GET routes without path params: those for renters (admin=False;
    admins may call them too) or those for admins only (admin=True)."""
    flags = route_flags()
    out = []
    for method, path, item, op in operations(spec):
        if method != "GET" or "{" in path:
            continue
        # GET /v1/proxy/auth answers 204 (nginx's auth_request): no body to check
        if "application/json" not in resolve(spec, op["responses"].get("200", {})).get(
                "content", {}):
            continue
        if ("API_ADMIN" in flags.get((method, path), set())) != admin:
            continue
        out.append(path)
    return out


def test_register_login_credit_match_the_schemas(spec, server):
    email = unique_email("t101")
    r = server.request("POST", "/v1/users", {"email": email, "password": PASSWORD, "name": "T"})
    user = check(spec, r, "POST", "/v1/users", 201)
    assert user["email"] == email and user["role"] == "renter"

    r = server.request("POST", "/v1/sessions", {"email": email.upper(), "password": PASSWORD})
    session = check(spec, r, "POST", "/v1/sessions", 201)
    assert session["user"]["id"] == user["id"]
    assert "suanli_session=" in r.headers.get("Set-Cookie", "")

    r = server.request("POST", "/v1/sessions", {"email": email, "password": "wrong password"})
    check(spec, r, "POST", "/v1/sessions", 401)
    assert r.code == "invalid_credentials"

    path = f"/v1/admin/users/{user['id']}/credit"
    key = str(uuid.uuid4())
    r = server.request("POST", path, {"amount_micros": 2500000, "memo": "t101"},
                       token=server.admin_token, headers={"Idempotency-Key": key})
    credit = check(spec, r, "POST", path, 201, "/v1/admin/users/{id}/credit")
    assert credit["balance_micros"] == 2500000
    again = server.request("POST", path, {"amount_micros": 2500000, "memo": "t101"},
                           token=server.admin_token, headers={"Idempotency-Key": key})
    assert again.status == 201 and again.json == credit
    assert again.headers.get("Idempotent-Replayed") == "true"
    r = server.request("POST", path, {"amount_micros": 1}, token=server.admin_token,
                       headers={"Idempotency-Key": key})
    check(spec, r, "POST", path, 422, "/v1/admin/users/{id}/credit")
    assert r.code == "idempotency_key_reused"

    r = server.request("POST", path, {"amount_micros": 1}, token=session["token"])
    check(spec, r, "POST", path, 404, "/v1/admin/users/{id}/credit")
    r = server.request("POST", "/v1/users", {"email": email, "password": PASSWORD, "x": 1})
    check(spec, r, "POST", "/v1/users", 400)
    assert r.code == "unknown_field"


def test_get_routes_match_their_schemas(spec, server):
    renter = server.register(name="T101 Renter")
    server.credit(renter["id"], 1000000)
    tok = renter["token"]
    admin = server.admin_token

    # give every list something to show, checking each write on the way
    r = server.request("POST", "/v1/tokens", {"name": "ci", "expires_in_days": 30}, token=tok)
    created = check(spec, r, "POST", "/v1/tokens", 201)
    r = server.request("POST", "/v1/tokens", {"name": "forever"}, token=tok)
    check(spec, r, "POST", "/v1/tokens", 201)
    r = server.request("POST", "/v1/ssh-keys", {"public_key": ed25519_line()}, token=tok)
    check(spec, r, "POST", "/v1/ssh-keys", 201)
    r = server.request("GET", "/v1/me/verification", token=tok)
    check(spec, r, "GET", "/v1/me/verification", 404)
    r = server.request("POST", "/v1/me/verification",
                       {"real_name": "Zhang San", "id_number": cn_id_number()}, token=tok)
    check(spec, r, "POST", "/v1/me/verification", 201)
    region = "t101-" + uuid.uuid4().hex[:6]
    r = server.request("POST", "/v1/admin/regions", {"id": region, "name": "T101"}, token=admin)
    check(spec, r, "POST", "/v1/admin/regions", 201)
    r = server.request("POST", "/v1/admin/gpu-models",
                       {"name": "T101 GPU " + uuid.uuid4().hex[:6], "vram_mib": 1024,
                        "cpu_cores_per_gpu": 2, "memory_mib_per_gpu": 4096,
                        "price_per_hour_micros": 500000}, token=admin)
    gpu = check(spec, r, "POST", "/v1/admin/gpu-models", 201)
    path = f"/v1/admin/gpu-models/{gpu['id']}"
    r = server.request("PATCH", path, {"price_per_hour_micros": 600000, "region": region},
                       token=admin)
    assert check(spec, r, "PATCH", path, 200, "/v1/admin/gpu-models/{id}")[
        "price_per_hour_micros"] == 600000
    r = server.request("POST", "/v1/admin/prices",
                       {"item": "data_disk", "region": region, "amount_micros": 8000,
                        "free_gib": 40}, token=admin)
    check(spec, r, "POST", "/v1/admin/prices", 201)
    # a public dataset (no host here: it stays pending)
    r = server.request("POST", "/v1/admin/datasets",
                       {"name": "t101-data", "path": "/srv/t101", "description": "T101"},
                       token=admin)
    check(spec, r, "POST", "/v1/admin/datasets", 201)

    for path in plain_get_routes(spec, admin=False):
        check(spec, server.request("GET", path, token=tok), "GET", path, 200)
    for path in plain_get_routes(spec, admin=True):
        check(spec, server.request("GET", path, token=admin), "GET", path, 200)
    me = check(spec, server.request("GET", "/v1/me", token=admin), "GET", "/v1/me", 200)
    assert me["role"] == "admin" and me["can_start_instances"] is True
    # query variants: a region, a second page, every verification state
    for path in ("/v1/market", "/v1/gpu-models"):
        check(spec, server.request("GET", f"{path}?region={region}", token=tok), "GET", path,
              200)
    page = check(spec, server.request("GET", "/v1/tokens?limit=1", token=tok), "GET",
                 "/v1/tokens", 200)
    assert page["next_cursor"] is not None
    check(spec, server.request("GET", f"/v1/tokens?limit=1&cursor={page['next_cursor']}",
                               token=tok), "GET", "/v1/tokens", 200)
    check(spec, server.request("GET", "/v1/admin/verifications?state=all", token=admin), "GET",
          "/v1/admin/verifications", 200)
    check(spec, server.request("GET", f"/v1/admin/users?email={renter['email']}", token=admin),
          "GET", "/v1/admin/users", 200)
    ledger = check(spec, server.request("GET", "/v1/ledger", token=tok), "GET", "/v1/ledger",
                   200)
    assert ledger["items"], "the credit should show in the ledger"

    # errors of the documented kinds
    r = server.request("GET", "/v1/tokens?limit=0", token=tok)
    check(spec, r, "GET", "/v1/tokens", 400)
    assert r.code == "invalid_parameter"
    r = server.request("GET", "/v1/me")
    check(spec, r, "GET", "/v1/me", 401)
    assert r.code == "unauthenticated"
    r = server.request("GET", "/v1/admin/users", token=tok)
    check(spec, r, "GET", "/v1/admin/users", 404)
    r = server.request("GET", "/v1/market?region=nowhere", token=tok)
    check(spec, r, "GET", "/v1/market", 404)

    # admin decides; tokens and keys are deleted
    path = f"/v1/admin/users/{renter['id']}/verification"
    r = server.request("POST", path, {"approve": True}, token=admin)
    check(spec, r, "POST", path, 200, "/v1/admin/users/{id}/verification")
    r = server.request("POST", path, {"approve": True}, token=admin)
    check(spec, r, "POST", path, 409, "/v1/admin/users/{id}/verification")
    assert server.request("DELETE", f"/v1/tokens/{created['id']}", token=tok).status == 204
    r = server.request("DELETE", f"/v1/tokens/{created['id']}", token=tok)
    check(spec, r, "DELETE", "/v1/tokens/{id}", 404, "/v1/tokens/{id}")
    r = server.request("DELETE", "/v1/admin/datasets/t101-data", token=admin)
    assert r.status == 204, r
    r = server.request("DELETE", "/v1/admin/datasets/t101-data", token=admin)
    check(spec, r, "DELETE", "/v1/admin/datasets/{id}", 404, "/v1/admin/datasets/{id}")
    assert server.request("DELETE", "/v1/sessions/current", token=tok).status == 204


def test_payment_webhook_matches_its_schema(spec, make_server):
    secret = "t101-secret"
    srv = make_server({"payments.webhook_secret": secret})
    user = srv.register()
    path = "/v1/payments/webhook"

    def deliver(payload, ts=None):
        body = json.dumps(payload).encode()
        ts = str(int(time.time()) if ts is None else ts)
        sig = hmac.new(secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
        return srv.request("POST", path, raw=body, headers={
            "X-Suanli-Timestamp": ts, "X-Suanli-Signature": "v1=" + sig})

    payload = {"transaction_id": "gw-" + uuid.uuid4().hex, "user_id": user["id"],
               "amount_micros": 3000000, "currency": "CNY"}
    assert check(spec, deliver(payload), "POST", path, 201)["duplicate"] is False
    assert check(spec, deliver(payload), "POST", path, 200)["duplicate"] is True
    r = deliver(payload, ts=int(time.time()) - 3600)
    check(spec, r, "POST", path, 401)
    assert r.code == "stale_signature"
    r = deliver({**payload, "amount_micros": 1})
    check(spec, r, "POST", path, 409)
    assert r.code == "transaction_conflict"
    r = srv.request("POST", path, {"transaction_id": "x"})
    check(spec, r, "POST", path, 401)
    assert r.code == "missing_signature"


def test_hosts_images_instances_match_the_schemas(spec, server):
    """The node agent's protocol done by hand over HTTP (enroll, heartbeat,
    desired) with a made-up inventory of simulated GPUs, then an instance
    through its lifecycle, the host's reports moving it along. No container
    is started: suanlid only records what should be."""
    admin = server.admin_token
    renter = server.register(name="T101 Hosts")
    tok = renter["token"]
    tag = uuid.uuid4().hex[:6]

    # renters see empty lists at first
    assert check(spec, server.request("GET", "/v1/instances", token=tok), "GET",
                 "/v1/instances", 200)["items"] == []
    check(spec, server.request("GET", "/v1/images", token=tok), "GET", "/v1/images", 200)

    # a region, a model of our own, an image for the region's hosts
    region = "t101h-" + tag
    r = server.request("POST", "/v1/admin/regions", {"id": region, "name": "T101 hosts"},
                       token=admin)
    check(spec, r, "POST", "/v1/admin/regions", 201)
    model = "T101 Sim " + tag
    r = server.request("POST", "/v1/admin/gpu-models",
                       {"name": model, "vram_mib": 24576, "cpu_cores_per_gpu": 4,
                        "memory_mib_per_gpu": 8192, "price_per_hour_micros": 1000000},
                       token=admin)
    check(spec, r, "POST", "/v1/admin/gpu-models", 201)
    image = "t101-img-" + tag
    r = server.request("POST", "/v1/admin/images",
                       {"name": image, "region": region, "description": "t101"}, token=admin,
                       headers={"Idempotency-Key": str(uuid.uuid4())})
    assert check(spec, r, "POST", "/v1/admin/images", 201)["state"] == "pending"
    r = server.request("POST", "/v1/admin/images", {"name": image}, token=admin)
    check(spec, r, "POST", "/v1/admin/images", 409)
    assert r.code == "image_exists"
    r = server.request("POST", "/v1/admin/images", {"name": "Bad Name"}, token=admin)
    check(spec, r, "POST", "/v1/admin/images", 400)
    assert r.code == "invalid_field"
    other_image = "t101-unbuilt-" + tag
    check(spec, server.request("POST", "/v1/admin/images", {"name": other_image,
                                                             "region": region}, token=admin),
          "POST", "/v1/admin/images", 201)

    # join tokens
    r = server.request("POST", "/v1/admin/join-tokens", {"region": region, "max_uses": 2},
                       token=admin)
    join = check(spec, r, "POST", "/v1/admin/join-tokens", 201)
    r = server.request("POST", "/v1/admin/join-tokens", {"region": "nowhere-" + tag},
                       token=admin)
    check(spec, r, "POST", "/v1/admin/join-tokens", 404)
    assert r.code == "no_such_region"
    spare = check(spec, server.request("POST", "/v1/admin/join-tokens",
                                       {"region": region, "expires_in_hours": 1}, token=admin),
                  "POST", "/v1/admin/join-tokens", 201)
    tokens = check(spec, server.request("GET", "/v1/admin/join-tokens", token=admin), "GET",
                   "/v1/admin/join-tokens", 200)
    assert {join["id"], spare["id"]} <= {t["id"] for t in tokens["items"]}
    path = f"/v1/admin/join-tokens/{spare['id']}"
    assert server.request("DELETE", path, token=admin).status == 204
    r = server.request("DELETE", path, token=admin)
    check(spec, r, "DELETE", path, 404, "/v1/admin/join-tokens/{id}")
    assert r.code == "no_such_join_token"

    # enroll two hosts: one with two simulated GPUs of our model, one without
    def inventory(gpus):
        return {"cpu_cores": 32, "memory_mib": 131072, "disk_total_gib": 1000,
                "disk_free_gib": 900, "driver_version": "550.54", "cuda_version": "12.4",
                "agent_version": "t101",
                "gpus": [{"index": i, "uuid": f"GPU-t101-{tag}-{i}", "name": f"Sim {model}",
                          "vram_mib": 24576, "simulated": True} for i in range(gpus)]}

    def enroll(gpus):
        r = server.request("POST", "/v1/nodes/enroll",
                           {"join_token": join["token"], "hostname": f"t101-{tag}-{gpus}",
                            "address": "203.0.113.7", "inventory": inventory(gpus)})
        return check(spec, r, "POST", "/v1/nodes/enroll", 201)

    host = enroll(2)
    node, node_tok = host["node_id"], host["node_token"]
    assert host["node"]["state"] == "online" and host["node"]["gpus_total"] == 2
    assert host["node"]["gpus"][0]["model"] == model and host["node"]["simulated"] is True
    other = enroll(0)
    r = server.request("POST", "/v1/nodes/enroll",
                       {"join_token": join["token"], "hostname": "x", "address": "x",
                        "inventory": inventory(0)})
    check(spec, r, "POST", "/v1/nodes/enroll", 401)
    assert r.code == "join_token_used"  # both uses are taken
    r = server.request("POST", "/v1/nodes/enroll",
                       {"join_token": "sl_wrong", "hostname": "x", "address": "x",
                        "inventory": inventory(0)})
    check(spec, r, "POST", "/v1/nodes/enroll", 401)
    assert r.code == "invalid_join_token"

    hb_path, desired_path = f"/v1/nodes/{node}/heartbeat", f"/v1/nodes/{node}/desired"

    def heartbeat(instances=(), images=None):
        # a host that serves the browser's terminal (its ticket is checked below)
        body = {"inventory": inventory(2), "revision": 0, "instances": list(instances),
                "terminals": True}
        if images is not None:
            body["images"] = images
        r = server.request("POST", hb_path, body, token=node_tok)
        return check(spec, r, "POST", hb_path, 200, "/v1/nodes/{id}/heartbeat")

    def desired():
        r = server.request("GET", desired_path, token=node_tok)
        return check(spec, r, "GET", desired_path, 200, "/v1/nodes/{id}/desired")

    assert {i["name"] for i in desired()["images"]} == {image, other_image}
    heartbeat(images=[{"name": image, "state": "ready", "os": "Debian 12", "python": "3.11",
                       "size_bytes": 123456789}])
    # a node speaks for itself only
    r = server.request("GET", desired_path, token=other["node_token"])
    check(spec, r, "GET", desired_path, 404, "/v1/nodes/{id}/desired")
    r = server.request("POST", hb_path, {"inventory": inventory(2)})
    check(spec, r, "POST", hb_path, 401, "/v1/nodes/{id}/heartbeat")
    assert r.code == "unauthenticated"
    r = server.request("GET", desired_path, token=tok)
    check(spec, r, "GET", desired_path, 401, "/v1/nodes/{id}/desired")
    r = server.request("POST", hb_path, {"inventory": inventory(2), "images": [
        {"name": image, "state": "sideways"}]}, token=node_tok)
    check(spec, r, "POST", hb_path, 400, "/v1/nodes/{id}/heartbeat")

    nodes = check(spec, server.request("GET", "/v1/admin/nodes", token=admin), "GET",
                  "/v1/admin/nodes", 200)
    assert {node, other["node_id"]} <= {n["id"] for n in nodes["items"]}
    check(spec, server.request("GET", f"/v1/admin/nodes/{node}", token=admin), "GET",
          "/v1/admin/nodes/{id}", 200)
    r = server.request("GET", "/v1/admin/nodes/n-aaaaaaaaaaaa", token=admin)
    check(spec, r, "GET", "/v1/admin/nodes/{id}", 404)
    assert r.code == "no_such_node"
    # a fleet's operations (t430), on the host that holds nothing
    opath = f"/v1/admin/nodes/{other['node_id']}"
    for verb, body, schema in (("cordon", {"reason": "t101"}, "cordon"), ("drain", None, "drain"),
                               ("uncordon", None, "uncordon")):
        r = server.request("POST", f"{opath}/{verb}", body, token=admin)
        check(spec, r, "POST", f"{opath}/{verb}", 200, "/v1/admin/nodes/{id}/" + schema)
    r = server.request("POST", f"{opath}/cordon", {"reason": ""}, token=admin)
    check(spec, r, "POST", f"{opath}/cordon", 400, "/v1/admin/nodes/{id}/cordon")
    r = server.request("DELETE", "/v1/admin/nodes/n-aaaaaaaaaaaa", token=admin)
    check(spec, r, "DELETE", "/v1/admin/nodes/n-aaaaaaaaaaaa", 404, "/v1/admin/nodes/{id}")
    market = check(spec, server.request("GET", f"/v1/market?region={region}", token=tok),
                   "GET", "/v1/market", 200)
    supply = next(m for m in market["items"][0]["gpu_models"] if m["name"] == model)
    assert (supply["gpus_total"], supply["gpus_free"], supply["hosts"],
            supply["simulated_gpus"]) == (2, 2, 1, 2)
    images = check(spec, server.request("GET", "/v1/images?limit=500", token=tok), "GET",
                   "/v1/images", 200)
    shown = {i["name"]: i for i in images["items"]}
    assert shown[image]["state"] == "ready" and shown[image]["nodes"] == 1
    # a renter sees ready images only; an admin sees them all
    assert other_image not in shown
    images = check(spec, server.request("GET", "/v1/images?limit=500", token=admin), "GET",
                   "/v1/images", 200)
    assert {i["name"]: i for i in images["items"]}[other_image]["state"] == "pending"
    # the image on each host of its region: ready where reported, missing on
    # the host that said nothing of it; admins only
    hpath = f"/v1/admin/images/{image}/hosts"
    hosts = check(spec, server.request("GET", hpath, token=admin), "GET", hpath, 200,
                  "/v1/admin/images/{id}/hosts")
    states = {h["node_id"]: (h["state"], h["size_bytes"]) for h in hosts["items"]}
    assert states == {node: ("ready", 123456789), other["node_id"]: ("missing", 0)}, hosts
    assert [h["updated_at"] for h in hosts["items"] if h["node_id"] == other["node_id"]] == [None]
    r = server.request("GET", hpath, token=tok)
    check(spec, r, "GET", hpath, 404, "/v1/admin/images/{id}/hosts")
    r = server.request("GET", "/v1/admin/images/no-such-image/hosts", token=admin)
    check(spec, r, "GET", "/v1/admin/images/no-such-image/hosts", 404,
          "/v1/admin/images/{id}/hosts")
    assert r.code == "no_such_image"

    # instances: refusals first
    create = {"region": region, "gpu_model": model, "gpus": 2, "image": image}
    r = server.request("POST", "/v1/instances", create, token=tok)
    check(spec, r, "POST", "/v1/instances", 403)
    assert r.code == "verification_required"
    for body, status, code in (
            ({**create, "gpus": 0}, 400, "invalid_field"),
            ({**create, "data_disk_gib": 0}, 400, "invalid_field"),
            ({**create, "gpu_model": "no such model"}, 404, "no_such_gpu_model"),
            ({**create, "image": "no-such-image"}, 404, "no_such_image"),
            ({**create, "region": "nowhere-" + tag}, 404, "no_such_region"),
            ({**create, "gpus": 3}, 409, "no_capacity"),
            ({**create, "image": other_image}, 409, "image_not_ready")):
        r = server.request("POST", "/v1/instances", body, token=admin)
        check(spec, r, "POST", "/v1/instances", status)
        assert r.code == code, (body, r)
    me = check(spec, server.request("GET", "/v1/me", token=admin), "GET", "/v1/me", 200)
    balance = check(spec, server.request("GET", "/v1/balance", token=admin), "GET",
                    "/v1/balance", 200)["balance_micros"]
    if balance < 2000000:
        r = server.request("POST", "/v1/instances", create, token=admin)
        check(spec, r, "POST", "/v1/instances", 409)
        assert r.code == "insufficient_balance"
        server.credit(me["id"], 10000000)

    # create, run, restart, stop
    r = server.request("POST", "/v1/instances", {**create, "name": "t101"}, token=admin,
                       headers={"Idempotency-Key": str(uuid.uuid4())})
    a = check(spec, r, "POST", "/v1/instances", 201)
    assert (a["state"], a["desired"], a["mode"], a["gpu_indices"]) == (
        "creating", "running", "gpu", [0, 1])
    assert a["simulated_gpus"] is True and a["ssh"]["host"] == "203.0.113.7"
    ipath = f"/v1/instances/{a['id']}"
    want = next(i for i in desired()["instances"] if i["id"] == a["id"])
    assert want["desired"] == "running" and want["gpus"] == [0, 1]
    heartbeat([{"id": a["id"], "state": "running", "generation": want["generation"]}])
    assert check(spec, server.request("GET", ipath, token=admin), "GET", ipath, 200,
                 "/v1/instances/{id}")["state"] == "running"
    r = server.request("POST", ipath + "/terminal", {}, token=admin)
    assert check(spec, r, "POST", ipath + "/terminal", 201,
                 "/v1/instances/{id}/terminal")["url"].startswith("ws://")
    r = server.request("POST", ipath + "/restart", {}, token=admin)
    assert check(spec, r, "POST", ipath + "/restart", 200,
                 "/v1/instances/{id}/restart")["state"] == "starting"
    r = server.request("POST", ipath + "/stop", token=admin)
    assert check(spec, r, "POST", ipath + "/stop", 200,
                 "/v1/instances/{id}/stop")["state"] == "stopping"
    heartbeat([{"id": a["id"], "state": "stopped", "generation": want["generation"] + 1}])
    r = server.request("POST", ipath + "/restart", token=admin)
    check(spec, r, "POST", ipath + "/restart", 409, "/v1/instances/{id}/restart")
    assert r.code == "invalid_state"
    r = server.request("POST", ipath + "/terminal", token=admin)
    check(spec, r, "POST", ipath + "/terminal", 409, "/v1/instances/{id}/terminal")
    assert r.code == "instance_not_running"

    # another instance takes the GPUs: starting the first needs a way out
    r = server.request("POST", "/v1/instances", create, token=admin)
    b = check(spec, r, "POST", "/v1/instances", 201)
    r = server.request("POST", ipath + "/start", token=admin)
    check(spec, r, "POST", ipath + "/start", 409, "/v1/instances/{id}/start")
    assert r.code == "gpus_unavailable" and "no-GPU" in r.json["error"]["message"]
    r = server.request("POST", ipath + "/start", {"mode": "warp"}, token=admin)
    check(spec, r, "POST", ipath + "/start", 400, "/v1/instances/{id}/start")
    r = server.request("POST", ipath + "/start", {"mode": "nogpu"}, token=admin)
    started = check(spec, r, "POST", ipath + "/start", 200, "/v1/instances/{id}/start")
    assert (started["state"], started["mode"], started["gpu_indices"]) == (
        "starting", "nogpu", [])

    # release the second; it leaves the default list
    bpath = f"/v1/instances/{b['id']}"
    r = server.request("POST", bpath + "/release", token=admin)
    assert check(spec, r, "POST", bpath + "/release", 200,
                 "/v1/instances/{id}/release")["state"] == "releasing"
    heartbeat([{"id": b["id"], "state": "absent"}])
    r = server.request("POST", bpath + "/stop", token=admin)
    check(spec, r, "POST", bpath + "/stop", 409, "/v1/instances/{id}/stop")
    assert r.code == "invalid_state"
    listed = check(spec, server.request("GET", "/v1/instances", token=admin), "GET",
                   "/v1/instances", 200)
    assert a["id"] in {i["id"] for i in listed["items"]}
    assert b["id"] not in {i["id"] for i in listed["items"]}
    released = check(spec, server.request("GET", "/v1/instances?state=released", token=admin),
                     "GET", "/v1/instances", 200)
    assert b["id"] in {i["id"] for i in released["items"]}
    check(spec, server.request("GET", "/v1/instances?state=all&limit=1", token=admin), "GET",
          "/v1/instances", 200)
    events = check(spec, server.request("GET", bpath + "/events", token=admin), "GET",
                   bpath + "/events", 200, "/v1/instances/{id}/events")
    assert [e["kind"] for e in events["items"]] == ["create", "release", "released"]

    # another user's instance is absent to the renter
    r = server.request("GET", ipath, token=tok)
    check(spec, r, "GET", ipath, 404, "/v1/instances/{id}")
    assert r.code == "no_such_instance"
    r = server.request("POST", ipath + "/stop", token=tok)
    check(spec, r, "POST", ipath + "/stop", 404, "/v1/instances/{id}/stop")
    r = server.request("GET", ipath + "/events", token=tok)
    check(spec, r, "GET", ipath + "/events", 404, "/v1/instances/{id}/events")

    # billing: meters, a plan bought and left, a pass, the bill behind it
    mpath = ipath + "/meters"
    meters = check(spec, server.request("GET", mpath, token=admin), "GET", mpath, 200,
                   "/v1/instances/{id}/meters")
    assert meters["items"], "a started instance has meters"
    r = server.request("GET", mpath, token=tok)
    check(spec, r, "GET", mpath, 404, "/v1/instances/{id}/meters")
    # metrics (t720): a heartbeat's samples, then the instance's series
    import time as _time
    now = int(_time.time())
    r = server.request("POST", hb_path, {
        "inventory": inventory(2), "metrics": [{
            "id": a["id"], "names": ["cpu_cores", "memory_used_bytes", "gpu0_utilization_percent"],
            "samples": [[now - 20, 1.5, 1 << 30, None], [now - 10, 2.5, 1 << 30, None]],
            "absent": {"gpu0_utilization_percent": "simulated GPU: no NVML"}}]}, token=node_tok)
    check(spec, r, "POST", hb_path, 200, "/v1/nodes/{id}/heartbeat")
    xpath = ipath + "/metrics"
    got = check(spec, server.request("GET", f"{xpath}?from={now - 600}&step=10s", token=admin),
                "GET", xpath, 200, "/v1/instances/{id}/metrics")
    assert [p[1] for p in got["series"]["cpu_cores"]] == [1.5, 2.5], got
    assert got["absent"] == {"gpu0_utilization_percent": "simulated GPU: no NVML"}
    r = server.request("GET", xpath, token=tok)
    check(spec, r, "GET", xpath, 404, "/v1/instances/{id}/metrics")
    r = server.request("GET", xpath + "?step=soon", token=admin)
    check(spec, r, "GET", xpath + "?step=soon", 400, "/v1/instances/{id}/metrics")
    ppath = ipath + "/plan"
    r = server.request("POST", ppath, {"plan": "yearly"}, token=admin)
    check(spec, r, "POST", ppath, 400, "/v1/instances/{id}/plan")
    r = server.request("POST", ppath, {"plan": "month"}, token=admin)
    check(spec, r, "POST", ppath, 409, "/v1/instances/{id}/plan")
    assert r.code == "insufficient_balance"
    server.credit(me["id"], 100_000_000)
    r = server.request("POST", ppath, {"plan": "day", "auto_renew": True}, token=admin,
                       headers={"Idempotency-Key": str(uuid.uuid4())})
    day = check(spec, r, "POST", ppath, 200, "/v1/instances/{id}/plan")
    assert day["plan"] == "day" and day["auto_renew"] is True and day["plan_price_micros"] > 0
    assert day["plan_expires_at"] is not None and day["release_at"] is None
    r = server.request("POST", ppath, {"plan": "payg"}, token=admin)
    payg = check(spec, r, "POST", ppath, 200, "/v1/instances/{id}/plan")
    assert payg["plan"] == "payg" and payg["plan_expires_at"] is None
    run = check(spec, server.request("POST", "/v1/admin/billing/run", token=admin), "POST",
                "/v1/admin/billing/run", 200)
    assert run["elapsed_us"] >= 0
    r = server.request("POST", "/v1/admin/billing/run", {"x": 1}, token=admin)
    check(spec, r, "POST", "/v1/admin/billing/run", 400)
    for by in ("day", "instance", "kind"):
        bill = check(spec, server.request("GET", f"/v1/bills?by={by}", token=admin), "GET",
                     "/v1/bills", 200)
        assert bill["by"] == by and bill["rows"], bill
        assert sum(row["amount_micros"] for row in bill["rows"]) == bill["total_micros"]
    kinds = {row["kind"] for row in bill["rows"]}
    assert {"plan", "plan_refund"} <= kinds, kinds
    # renter-wide meters (t670): file storage and saved images
    check(spec, server.request("GET", "/v1/meters", token=admin), "GET", "/v1/meters", 200)
    check(spec, server.request("GET", "/v1/meters?limit=0", token=admin), "GET", "/v1/meters",
          400)
    for st in check(spec, server.request("GET", "/v1/storage", token=admin), "GET",
                    "/v1/storage", 200)["items"]:
        assert st["billed"] is True and st["over_free_mib"] >= 0, st
    check(spec, server.request("GET", "/v1/bills/charges?kind=file_storage", token=admin), "GET",
          "/v1/bills/charges", 200)
    r = server.request("GET", "/v1/bills?month=2026-13", token=admin)
    check(spec, r, "GET", "/v1/bills", 400)
    assert r.code == "invalid_parameter"
    for by in ("day", "instance", "kind", "user"):
        bill = check(spec, server.request("GET", f"/v1/admin/bills?by={by}", token=admin), "GET",
                     "/v1/admin/bills", 200)
        assert bill["by"] == by and bill["rows"], bill
    r = server.request("GET", "/v1/admin/bills?by=week", token=admin)
    check(spec, r, "GET", "/v1/admin/bills", 400)
    charges = check(spec, server.request("GET", f"/v1/bills/charges?instance={a['id']}&limit=1",
                                         token=admin), "GET", "/v1/bills/charges", 200)
    assert charges["items"] and charges["next_cursor"] is not None
    check(spec, server.request("GET", "/v1/bills/charges?kind=plan_refund", token=admin), "GET",
          "/v1/bills/charges", 200)
    events = check(spec, server.request("GET", "/v1/events", token=admin), "GET", "/v1/events",
                   200)
    assert {"plan", "plan_ended"} <= {e["kind"] for e in events["items"]}
    assert check(spec, server.request("GET", "/v1/admin/billing/check", token=admin), "GET",
                 "/v1/admin/billing/check", 200)["ok"] is True
