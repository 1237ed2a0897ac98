"""t512: the console's live updates without the event stream (issue 13,
item 2: "state changes appear without reloading"), in real chromium against
the real suanlid: every request for GET /v1/events/stream fails (as behind a
proxy that buffers or drops it), and the console falls back to polling the
JSON routes every 10 s (console/src/lib/events.js): the events page says so,
and an operator's credit shows in the header without a reload."""
import os

from conftest import PASSWORD, ROOT
from test_t510_console_renter import browse

SCRIPT = os.path.join(ROOT, "tests", "browser", "t512_fallback.mjs")


def test_live_updates_fall_back_to_polling(server):
    user = server.register()
    out = browse(SCRIPT, {"SUANLI_URL": server.url, "SUANLI_EMAIL": user["email"],
                          "SUANLI_PASSWORD": PASSWORD, "SUANLI_USER_ID": user["id"],
                          "SUANLI_ADMIN_TOKEN": server.admin_token})
    r = out["results"]
    assert r["stream_requests_refused"] >= 1
    assert r["badge"] == "Updating every 10 s"
    assert "7.00" in r["balance_after"], r
    # one poll period (10 s) and the request's time
    assert r["balance_seconds"] <= 15, r
