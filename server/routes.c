/* The route table: one row per route, the whole API at a glance. Routes are
 * matched in order; docs/api/openapi.yaml must list exactly these (a test
 * compares them through `suanlid --print-routes`). */
#include "routes.h"

/* after the flags, more of struct api_route's fields by name (.prepare) */
#define R(m, p, h, f, ...)                                                                         \
    {                                                                                              \
        .method = m, .pattern = p, .handler = h, .flags = f, __VA_ARGS__                           \
    }

const struct api_route api_routes[] = {
    R("GET", "/healthz", api_healthz, API_PUBLIC),
    R("GET", "/metrics", api_metrics, API_PUBLIC),

    R("POST", "/v1/users", api_register, API_PUBLIC | API_OWN_TX),
    R("POST", "/v1/sessions", api_login, API_PUBLIC | API_NO_IDEMPOTENCY | API_OWN_TX),
    R("DELETE", "/v1/sessions/current", api_logout, 0),
    R("GET", "/v1/me", api_me, 0),
    R("GET", "/v1/me/verification", api_verification_get, 0),
    R("GET", "/v1/me/idle-stop", api_me_idle_stop_get, 0),
    R("POST", "/v1/me/idle-stop", api_me_idle_stop_set, 0),
    R("POST", "/v1/me/verification", api_verification_submit, 0),

    R("GET", "/v1/tokens", api_tokens_list, 0),
    R("POST", "/v1/tokens", api_tokens_create, API_NO_IDEMPOTENCY),
    R("DELETE", "/v1/tokens/{id}", api_tokens_delete, 0),
    R("GET", "/v1/ssh-keys", api_ssh_keys_list, 0),
    R("POST", "/v1/ssh-keys", api_ssh_keys_create, 0),
    R("DELETE", "/v1/ssh-keys/{id}", api_ssh_keys_delete, 0),

    R("GET", "/v1/balance", api_balance, 0),
    R("GET", "/v1/ledger", api_ledger, 0),
    R("GET", "/v1/bills", api_bills, 0),
    R("GET", "/v1/bills/charges", api_bill_charges, 0),
    R("GET", "/v1/events", api_events, 0),
    R("GET", "/v1/events/stream", api_events_stream, 0),
    R("POST", "/v1/payments/webhook", api_payment_webhook,
      API_PUBLIC | API_RAW_BODY | API_NO_IDEMPOTENCY),

    R("GET", "/v1/regions", api_regions, 0),
    R("GET", "/v1/gpu-models", api_gpu_models, 0),
    R("GET", "/v1/market", api_market, 0),
    R("GET", "/v1/images", api_images_list, 0),

    R("POST", "/v1/instances", api_instances_create, 0, .prepare = api_instances_create_prepare),
    R("GET", "/v1/instances", api_instances_list, 0),
    R("GET", "/v1/instances/{id}", api_instances_get, API_INSTANCE),
    R("GET", "/v1/instances/{id}/events", api_instances_events, API_INSTANCE),
    R("POST", "/v1/instances/{id}/start", api_instances_start, API_INSTANCE),
    R("POST", "/v1/instances/{id}/stop", api_instances_stop, API_INSTANCE),
    R("POST", "/v1/instances/{id}/restart", api_instances_restart, API_INSTANCE),
    R("POST", "/v1/instances/{id}/release", api_instances_release, API_INSTANCE),
    R("POST", "/v1/instances/{id}/clone", api_instances_clone, API_INSTANCE),
    R("POST", "/v1/instances/{id}/migrate", api_instances_migrate, API_INSTANCE),
    R("GET", "/v1/instances/{id}/meters", api_instances_meters, API_INSTANCE),
    R("POST", "/v1/instances/{id}/plan", api_instances_plan, API_INSTANCE),
    R("POST", "/v1/instances/{id}/idle-stop", api_instances_idle_stop, API_INSTANCE),
    R("GET", "/v1/instances/{id}/ports", api_instances_ports_list, API_INSTANCE),
    R("POST", "/v1/instances/{id}/ports", api_instances_ports_set, API_INSTANCE),
    R("DELETE", "/v1/instances/{id}/ports/{port}", api_instances_ports_delete, API_INSTANCE),
    R("POST", "/v1/instances/{id}/terminal", api_instances_terminal,
      API_INSTANCE | API_NO_IDEMPOTENCY),
    R("GET", "/v1/nodes/{id}/proxy/auth", api_proxy_auth, API_NODE | API_QUIET),
    R("GET", "/v1/front/route", api_front_route, API_FRONT | API_QUIET),

    R("GET", "/v1/admin/users", api_admin_users, API_ADMIN),
    R("POST", "/v1/admin/users/{id}/credit", api_admin_credit, API_ADMIN),
    R("POST", "/v1/admin/users/{id}/verification", api_admin_verification_decide, API_ADMIN),
    R("GET", "/v1/admin/verifications", api_admin_verifications, API_ADMIN),
    R("GET", "/v1/admin/ledger/check", api_admin_ledger_check, API_ADMIN),
    R("GET", "/v1/admin/bills", api_admin_bills, API_ADMIN),
    R("GET", "/v1/admin/billing/check", api_admin_billing_check, API_ADMIN),
    R("POST", "/v1/admin/billing/run", api_admin_billing_run,
      API_ADMIN | API_OWN_TX | API_NO_IDEMPOTENCY),
    R("GET", "/v1/admin/regions", api_admin_regions_list, API_ADMIN),
    R("POST", "/v1/admin/regions", api_admin_regions_create, API_ADMIN),
    R("GET", "/v1/admin/gpu-models", api_admin_gpu_models_list, API_ADMIN),
    R("POST", "/v1/admin/gpu-models", api_admin_gpu_models_create, API_ADMIN),
    R("PATCH", "/v1/admin/gpu-models/{id}", api_admin_gpu_models_update, API_ADMIN),
    R("GET", "/v1/admin/prices", api_admin_prices_list, API_ADMIN),
    R("POST", "/v1/admin/prices", api_admin_prices_create, API_ADMIN),
    R("GET", "/v1/admin/join-tokens", api_admin_join_tokens_list, API_ADMIN),
    R("POST", "/v1/admin/join-tokens", api_admin_join_tokens_create,
      API_ADMIN | API_NO_IDEMPOTENCY),
    R("DELETE", "/v1/admin/join-tokens/{id}", api_admin_join_tokens_delete, API_ADMIN),
    R("POST", "/v1/admin/images", api_admin_images_create, API_ADMIN),
    R("PUT", "/v1/admin/images/{id}/archive", api_admin_images_upload, API_ADMIN | API_UPLOAD),
    R("GET", "/v1/admin/images/{id}/hosts", api_admin_image_hosts, API_ADMIN),
    R("GET", "/v1/admin/nodes", api_admin_nodes_list, API_ADMIN),
    R("GET", "/v1/admin/nodes/{id}", api_admin_nodes_get, API_ADMIN),
    R("DELETE", "/v1/admin/nodes/{id}", api_admin_nodes_remove, API_ADMIN),
    R("POST", "/v1/admin/nodes/{id}/cordon", api_admin_nodes_cordon, API_ADMIN),
    R("POST", "/v1/admin/nodes/{id}/drain", api_admin_nodes_drain, API_ADMIN),
    R("POST", "/v1/admin/nodes/{id}/uncordon", api_admin_nodes_uncordon, API_ADMIN),

    R("POST", "/v1/nodes/enroll", api_nodes_enroll, API_PUBLIC | API_NO_IDEMPOTENCY),
    R("POST", "/v1/nodes/{id}/heartbeat", api_nodes_heartbeat,
      API_NODE | API_NO_IDEMPOTENCY | API_QUIET),
    R("GET", "/v1/nodes/{id}/desired", api_nodes_desired, API_NODE | API_QUIET),
    R("GET", "/v1/nodes/{id}/instances/{instance}/metadata", api_nodes_instance_metadata,
      API_NODE | API_INSTANCE),
    R("POST", "/v1/nodes/{id}/instances/{instance}/stop", api_nodes_instance_stop,
      API_NODE | API_INSTANCE | API_NO_IDEMPOTENCY),
    R("GET", "/v1/nodes/{id}/uploads/{sha256}", api_nodes_upload_get, API_NODE),
};

const size_t api_routes_count = sizeof(api_routes) / sizeof(api_routes[0]);
