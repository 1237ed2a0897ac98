/* Every handler of the route table (routes.c), grouped by the file that
 * holds it. */
#ifndef SL_ROUTES_H
#define SL_ROUTES_H

#include "api.h"

#define HANDLER(name)                                                                              \
    int name(struct api_request *req, struct api_response *res, struct sl_error *err)

/* api-accounts.c */
HANDLER(api_register);
HANDLER(api_login);
HANDLER(api_logout);
HANDLER(api_me);
HANDLER(api_admin_users);
/* api-tokens.c */
HANDLER(api_tokens_list);
HANDLER(api_tokens_create);
HANDLER(api_tokens_delete);
/* api-ssh-keys.c */
HANDLER(api_ssh_keys_list);
HANDLER(api_ssh_keys_create);
HANDLER(api_ssh_keys_delete);
/* api-notify.c */
HANDLER(api_notify_channels_list);
HANDLER(api_notify_channels_create);
int api_notify_channels_create_prepare(struct api_request *req, struct sl_error *err);
HANDLER(api_notify_channels_delete);
HANDLER(api_notify_channels_confirm);
HANDLER(api_notify_channels_test);
HANDLER(api_notify_kinds_list);
HANDLER(api_notify_kinds_set);
HANDLER(api_notify_log);
/* api-verification.c */
HANDLER(api_verification_submit);
HANDLER(api_verification_get);
HANDLER(api_admin_verifications);
HANDLER(api_admin_verification_decide);
/* api-money.c */
HANDLER(api_balance);
HANDLER(api_bills);
HANDLER(api_admin_bills);
HANDLER(api_bill_charges);
HANDLER(api_events);
HANDLER(api_instances_meters);
HANDLER(api_meters);
HANDLER(api_instances_plan);
HANDLER(api_admin_billing_check);
HANDLER(api_admin_billing_run);
HANDLER(api_ledger);
HANDLER(api_admin_credit);
HANDLER(api_admin_ledger_check);
/* api-payments.c */
HANDLER(api_payment_webhook);
/* api-catalog.c */
HANDLER(api_regions);
HANDLER(api_gpu_models);
HANDLER(api_market);
/* The host offers of every region (of region when not NULL), one list, as
 * GET /v1/market lists them unfiltered. A new reference, or NULL with err. */
json_t *api_market_offers(struct server *srv, const char *region, struct sl_error *err);
HANDLER(api_admin_regions_list);
HANDLER(api_admin_regions_create);
HANDLER(api_admin_gpu_models_list);
HANDLER(api_admin_gpu_models_create);
HANDLER(api_admin_gpu_models_update);
HANDLER(api_admin_prices_list);
HANDLER(api_admin_prices_create);
/* api-estimate.c */
HANDLER(api_estimate);
/* api-nodes.c */
HANDLER(api_admin_join_tokens_create);
HANDLER(api_admin_join_tokens_list);
HANDLER(api_admin_join_tokens_delete);
HANDLER(api_admin_nodes_list);
HANDLER(api_admin_nodes_get);
HANDLER(api_admin_nodes_cordon);
HANDLER(api_admin_nodes_drain);
HANDLER(api_admin_nodes_uncordon);
HANDLER(api_admin_nodes_remove);
HANDLER(api_nodes_enroll);
HANDLER(api_nodes_heartbeat);
HANDLER(api_nodes_desired);
/* api-instances.c */
HANDLER(api_instances_create);
int api_instances_create_prepare(struct api_request *req, struct sl_error *err);
HANDLER(api_instances_list);
HANDLER(api_instances_get);
HANDLER(api_instances_events);
HANDLER(api_instances_start);
HANDLER(api_instances_stop);
HANDLER(api_instances_restart);
HANDLER(api_instances_release);
/* api-clones.c */
HANDLER(api_instances_clone);
HANDLER(api_instances_migrate);
/* disk-resize.c */
HANDLER(api_instances_disk);
/* api-ports.c */
HANDLER(api_instances_ports_list);
HANDLER(api_instances_ports_set);
HANDLER(api_instances_ports_delete);
HANDLER(api_proxy_auth);
/* terminal.c */
HANDLER(api_instances_terminal);
HANDLER(api_front_route);
/* api-inside.c */
HANDLER(api_nodes_instance_metadata);
HANDLER(api_nodes_instance_stop);
HANDLER(api_instances_idle_stop);
HANDLER(api_me_idle_stop_get);
HANDLER(api_me_idle_stop_set);
/* api-datasets.c */
HANDLER(api_datasets_list);
HANDLER(api_admin_datasets_list);
HANDLER(api_admin_datasets_create);
HANDLER(api_admin_datasets_upload);
HANDLER(api_admin_datasets_delete);
HANDLER(api_storage_list);
HANDLER(api_storage_files);
HANDLER(api_admin_storage_list);
HANDLER(api_admin_storage_set);
int api_admin_datasets_upload_prepare(struct api_request *req, struct sl_error *err);
/* api-images.c */
HANDLER(api_images_list);
HANDLER(api_admin_images_create);
HANDLER(api_admin_image_hosts);
HANDLER(api_admin_images_upload);
HANDLER(api_admin_images_delete);
int api_admin_images_upload_prepare(struct api_request *req, struct sl_error *err);
HANDLER(api_nodes_upload_get);
/* image-save.c */
HANDLER(api_instances_image_save);
HANDLER(api_images_get);
HANDLER(api_images_delete);
HANDLER(api_images_share);
HANDLER(api_images_unshare);
HANDLER(api_nodes_save_layer);
HANDLER(api_nodes_save_failure);
/* event-stream.c */
HANDLER(api_events_stream);
/* api-health.c */
HANDLER(api_healthz);
HANDLER(api_metrics);

/* api-metrics.c */
HANDLER(api_instances_metrics);

#endif
