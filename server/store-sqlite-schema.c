/* SQLite schema migrations. Append only: a released migration never changes;
 * the version of migrations[i] is i + 1 (tests/unit/test-store.c checks the
 * list against the schema_migrations table). */

const char *const sqlite_migrations[] = {
    /* 1: accounts, money, catalog, API bookkeeping */
    "CREATE TABLE users ("
    "  id TEXT PRIMARY KEY,"
    "  email TEXT NOT NULL UNIQUE,"
    "  name TEXT NOT NULL,"
    "  password_hash TEXT NOT NULL,"
    "  role TEXT NOT NULL DEFAULT 'renter' CHECK (role IN ('renter', 'admin')),"
    "  verification TEXT NOT NULL DEFAULT 'none'"
    "    CHECK (verification IN ('none', 'pending', 'approved', 'rejected')),"
    "  created_at INTEGER NOT NULL);"

    "CREATE TABLE tokens ("
    "  id TEXT PRIMARY KEY,"
    "  user_id TEXT NOT NULL REFERENCES users(id),"
    "  kind TEXT NOT NULL CHECK (kind IN ('session', 'api')),"
    "  name TEXT NOT NULL,"
    "  hash TEXT NOT NULL UNIQUE,"
    "  hint TEXT NOT NULL,"
    "  created_at INTEGER NOT NULL,"
    "  expires_at INTEGER,"
    "  last_used_at INTEGER);"
    "CREATE INDEX tokens_user ON tokens(user_id, kind);"

    "CREATE TABLE ssh_keys ("
    "  id TEXT PRIMARY KEY,"
    "  user_id TEXT NOT NULL REFERENCES users(id),"
    "  name TEXT NOT NULL,"
    "  type TEXT NOT NULL,"
    "  public_key TEXT NOT NULL,"
    "  fingerprint TEXT NOT NULL,"
    "  created_at INTEGER NOT NULL,"
    "  UNIQUE (user_id, fingerprint));"

    "CREATE TABLE verifications ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  id TEXT NOT NULL UNIQUE,"
    "  user_id TEXT NOT NULL REFERENCES users(id),"
    "  real_name TEXT NOT NULL,"
    "  id_number_hash TEXT NOT NULL,"
    "  id_number_masked TEXT NOT NULL,"
    "  state TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'rejected')),"
    "  reason TEXT NOT NULL DEFAULT '',"
    "  created_at INTEGER NOT NULL,"
    "  decided_at INTEGER,"
    "  decided_by TEXT);"
    "CREATE INDEX verifications_state ON verifications(state, seq);"
    "CREATE INDEX verifications_user ON verifications(user_id, seq);"

    /* money: double-entry, append-only (DESIGN.md section 4) */
    "CREATE TABLE accounts ("
    "  id TEXT PRIMARY KEY,"
    "  user_id TEXT REFERENCES users(id),"
    "  balance_micros INTEGER NOT NULL DEFAULT 0,"
    "  created_at INTEGER NOT NULL);"
    "CREATE TABLE ledger_txns ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  id TEXT NOT NULL UNIQUE,"
    "  kind TEXT NOT NULL,"
    "  memo TEXT NOT NULL DEFAULT '',"
    "  idempotency_key TEXT NOT NULL UNIQUE,"
    "  actor TEXT,"
    "  created_at INTEGER NOT NULL);"
    "CREATE TABLE ledger_entries ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  txn_id TEXT NOT NULL REFERENCES ledger_txns(id),"
    "  account_id TEXT NOT NULL REFERENCES accounts(id),"
    "  amount_micros INTEGER NOT NULL,"
    "  balance_after_micros INTEGER NOT NULL,"
    "  created_at INTEGER NOT NULL);"
    "CREATE INDEX ledger_entries_account ON ledger_entries(account_id, seq);"
    "CREATE INDEX ledger_entries_txn ON ledger_entries(txn_id);"
    "CREATE TRIGGER ledger_txns_append_only_u BEFORE UPDATE ON ledger_txns"
    "  BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;"
    "CREATE TRIGGER ledger_txns_append_only_d BEFORE DELETE ON ledger_txns"
    "  BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;"
    "CREATE TRIGGER ledger_entries_append_only_u BEFORE UPDATE ON ledger_entries"
    "  BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;"
    "CREATE TRIGGER ledger_entries_append_only_d BEFORE DELETE ON ledger_entries"
    "  BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;"

    "CREATE TABLE payments ("
    "  gateway_txn_id TEXT PRIMARY KEY,"
    "  user_id TEXT NOT NULL REFERENCES users(id),"
    "  amount_micros INTEGER NOT NULL,"
    "  currency TEXT NOT NULL,"
    "  ledger_txn_id TEXT NOT NULL,"
    "  created_at INTEGER NOT NULL);"

    /* catalog; prices are history, the newest row in effect wins */
    "CREATE TABLE regions ("
    "  id TEXT PRIMARY KEY,"
    "  name TEXT NOT NULL,"
    "  sample INTEGER NOT NULL DEFAULT 0,"
    "  created_at INTEGER NOT NULL);"
    "CREATE TABLE gpu_models ("
    "  id TEXT PRIMARY KEY,"
    "  name TEXT NOT NULL UNIQUE,"
    "  vram_mib INTEGER NOT NULL,"
    "  cpu_cores_per_gpu INTEGER NOT NULL,"
    "  memory_mib_per_gpu INTEGER NOT NULL,"
    "  sample INTEGER NOT NULL DEFAULT 0,"
    "  created_at INTEGER NOT NULL);"
    "CREATE TABLE prices ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  item TEXT NOT NULL,"
    "  region_id TEXT NOT NULL DEFAULT '',"
    "  amount_micros INTEGER NOT NULL CHECK (amount_micros >= 0),"
    "  free_gib INTEGER NOT NULL DEFAULT 0,"
    "  effective_from INTEGER NOT NULL,"
    "  created_by TEXT,"
    "  sample INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX prices_item ON prices(item, region_id, effective_from);"
    "CREATE TRIGGER prices_append_only_u BEFORE UPDATE ON prices"
    "  BEGIN SELECT RAISE(ABORT, 'prices are history: add a new row'); END;"

    "CREATE TABLE idempotency_keys ("
    "  owner TEXT NOT NULL,"
    "  key TEXT NOT NULL,"
    "  method TEXT NOT NULL,"
    "  path TEXT NOT NULL,"
    "  request_hash TEXT NOT NULL,"
    "  status INTEGER NOT NULL,"
    "  response TEXT NOT NULL,"
    "  created_at INTEGER NOT NULL,"
    "  PRIMARY KEY (owner, key));"
    "CREATE INDEX idempotency_keys_age ON idempotency_keys(created_at);"

    "CREATE TABLE login_failures ("
    "  subject TEXT NOT NULL,"
    "  at INTEGER NOT NULL);"
    "CREATE INDEX login_failures_subject ON login_failures(subject, at);"

    "CREATE TABLE settings (name TEXT PRIMARY KEY, value TEXT NOT NULL);",

    /* 2: hosts and their GPUs (DESIGN.md section 1, 6) */
    "CREATE TABLE join_tokens ("
    "  id TEXT PRIMARY KEY,"
    "  hash TEXT NOT NULL UNIQUE,"
    "  region_id TEXT NOT NULL REFERENCES regions(id),"
    "  created_by TEXT,"
    "  created_at INTEGER NOT NULL,"
    "  expires_at INTEGER NOT NULL);"
    "CREATE TABLE nodes ("
    "  id TEXT PRIMARY KEY,"
    "  hostname TEXT NOT NULL,"
    "  address TEXT NOT NULL,"
    "  region_id TEXT NOT NULL REFERENCES regions(id),"
    "  token_hash TEXT NOT NULL UNIQUE,"
    "  cpu_cores INTEGER NOT NULL DEFAULT 0,"
    "  memory_mib INTEGER NOT NULL DEFAULT 0,"
    "  disk_total_gib INTEGER NOT NULL DEFAULT 0,"
    "  disk_free_gib INTEGER NOT NULL DEFAULT 0,"
    "  driver_version TEXT NOT NULL DEFAULT '',"
    "  cuda_version TEXT NOT NULL DEFAULT '',"
    "  agent_version TEXT NOT NULL DEFAULT '',"
    "  ssh_port_min INTEGER NOT NULL,"
    "  ssh_port_max INTEGER NOT NULL,"
    "  desired_revision INTEGER NOT NULL DEFAULT 1,"
    "  reported_revision INTEGER NOT NULL DEFAULT 0,"
    "  last_heartbeat INTEGER,"
    "  created_at INTEGER NOT NULL);"
    "CREATE TABLE gpus ("
    "  node_id TEXT NOT NULL REFERENCES nodes(id),"
    "  idx INTEGER NOT NULL,"
    "  uuid TEXT NOT NULL,"
    "  name TEXT NOT NULL,"
    "  gpu_model_id TEXT REFERENCES gpu_models(id),"
    "  vram_mib INTEGER NOT NULL,"
    "  simulated INTEGER NOT NULL DEFAULT 0,"
    "  instance_id TEXT,"
    "  PRIMARY KEY (node_id, idx));"
    "CREATE INDEX gpus_free ON gpus(gpu_model_id, node_id) WHERE instance_id IS NULL;"

    /* images: what renters may pick; nodes report which they hold */
    "CREATE TABLE images ("
    "  name TEXT PRIMARY KEY,"
    "  kind TEXT NOT NULL CHECK (kind IN ('base', 'framework', 'community', 'private')),"
    "  recipe TEXT NOT NULL DEFAULT '',"
    "  region_id TEXT NOT NULL DEFAULT '',"
    "  description TEXT NOT NULL DEFAULT '',"
    "  created_by TEXT,"
    "  created_at INTEGER NOT NULL);"
    "CREATE TABLE node_images ("
    "  node_id TEXT NOT NULL REFERENCES nodes(id),"
    "  name TEXT NOT NULL,"
    "  state TEXT NOT NULL,"
    "  os TEXT NOT NULL DEFAULT '',"
    "  python TEXT NOT NULL DEFAULT '',"
    "  cuda TEXT NOT NULL DEFAULT '',"
    "  framework TEXT NOT NULL DEFAULT '',"
    "  size_bytes INTEGER NOT NULL DEFAULT 0,"
    "  message TEXT NOT NULL DEFAULT '',"
    "  updated_at INTEGER NOT NULL,"
    "  PRIMARY KEY (node_id, name));"

    /* instances (DESIGN.md section 3) */
    "CREATE TABLE instances ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  id TEXT NOT NULL UNIQUE,"
    "  user_id TEXT NOT NULL REFERENCES users(id),"
    "  name TEXT NOT NULL,"
    "  region_id TEXT NOT NULL,"
    "  node_id TEXT NOT NULL REFERENCES nodes(id),"
    "  gpu_model_id TEXT NOT NULL REFERENCES gpu_models(id),"
    "  gpus INTEGER NOT NULL,"
    "  image TEXT NOT NULL,"
    "  system_disk_gib INTEGER NOT NULL,"
    "  data_disk_gib INTEGER NOT NULL,"
    "  ssh_port INTEGER NOT NULL,"
    "  root_password TEXT NOT NULL,"
    "  state TEXT NOT NULL CHECK (state IN ('creating', 'running', 'stopping', 'stopped',"
    "    'starting', 'releasing', 'released', 'failed')),"
    "  desired TEXT NOT NULL CHECK (desired IN ('running', 'stopped', 'released')),"
    "  mode TEXT NOT NULL DEFAULT 'gpu' CHECK (mode IN ('gpu', 'nogpu')),"
    "  generation INTEGER NOT NULL DEFAULT 1,"
    "  plan TEXT NOT NULL DEFAULT 'payg',"
    "  state_message TEXT NOT NULL DEFAULT '',"
    "  created_at INTEGER NOT NULL,"
    "  updated_at INTEGER NOT NULL);"
    "CREATE UNIQUE INDEX instances_ssh_port ON instances(node_id, ssh_port)"
    "  WHERE state != 'released';"
    "CREATE INDEX instances_user ON instances(user_id, seq);"
    "CREATE INDEX instances_node ON instances(node_id, state);"
    "CREATE TABLE events ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  instance_id TEXT NOT NULL,"
    "  user_id TEXT NOT NULL,"
    "  kind TEXT NOT NULL,"
    "  state TEXT NOT NULL DEFAULT '',"
    "  reason TEXT NOT NULL DEFAULT '',"
    "  message TEXT NOT NULL DEFAULT '',"
    "  created_at INTEGER NOT NULL);"
    "CREATE INDEX events_instance ON events(instance_id, seq);",

    /* 3: per-second billing (DESIGN.md section 4): meters are the billed
     * intervals, charges say what each settlement's ledger transaction was
     * for; plans and the stop clock live on the instance. */
    "ALTER TABLE instances ADD COLUMN stopped_at INTEGER;"
    "ALTER TABLE instances ADD COLUMN released_at INTEGER;"
    "ALTER TABLE instances ADD COLUMN release_warnings INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE instances ADD COLUMN plan_started_at INTEGER;"
    "ALTER TABLE instances ADD COLUMN plan_expires_at INTEGER;"
    "ALTER TABLE instances ADD COLUMN plan_price_micros INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE instances ADD COLUMN plan_auto_renew INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE instances ADD COLUMN plan_seq INTEGER NOT NULL DEFAULT 0;"
    "CREATE INDEX instances_plan ON instances(plan_expires_at) WHERE plan != 'payg';"
    "CREATE INDEX instances_stopped ON instances(stopped_at) WHERE state = 'stopped';"
    "ALTER TABLE users ADD COLUMN balance_warned INTEGER NOT NULL DEFAULT 0;"
    "CREATE TABLE meters ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  instance_id TEXT NOT NULL,"
    "  user_id TEXT NOT NULL,"
    "  node_id TEXT NOT NULL,"
    "  item TEXT NOT NULL CHECK (item IN ('gpu', 'nogpu', 'data_disk')),"
    "  quantity INTEGER NOT NULL,"
    "  unit_price_micros INTEGER NOT NULL,"
    "  amount_micros INTEGER NOT NULL CHECK (amount_micros >= 0),"
    "  period_s INTEGER NOT NULL CHECK (period_s > 0),"
    "  started_at INTEGER NOT NULL,"
    "  ended_at INTEGER,"
    "  settled_until INTEGER NOT NULL,"
    "  charged_micros INTEGER NOT NULL DEFAULT 0,"
    "  settlements INTEGER NOT NULL DEFAULT 0,"
    "  CHECK (ended_at IS NULL OR ended_at >= started_at),"
    "  CHECK (settled_until >= started_at));"
    "CREATE INDEX meters_instance ON meters(instance_id, seq);"
    "CREATE INDEX meters_node ON meters(node_id) WHERE ended_at IS NULL;"
    "CREATE INDEX meters_user ON meters(user_id) WHERE ended_at IS NULL;"
    "CREATE INDEX meters_unsettled ON meters(seq)"
    "  WHERE ended_at IS NOT NULL AND settled_until < ended_at;"
    "CREATE TABLE charges ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  txn_id TEXT NOT NULL,"
    "  user_id TEXT NOT NULL,"
    "  instance_id TEXT NOT NULL,"
    "  item TEXT NOT NULL,"
    "  meter_seq INTEGER,"
    "  settlement INTEGER,"
    "  period_from INTEGER NOT NULL,"
    "  period_to INTEGER NOT NULL,"
    "  amount_micros INTEGER NOT NULL,"
    "  created_at INTEGER NOT NULL);"
    "CREATE INDEX charges_user ON charges(user_id, period_from);"
    /* a settlement's key: (instance,) meter, sequence, unique */
    "CREATE UNIQUE INDEX charges_settlement ON charges(meter_seq, settlement)"
    "  WHERE meter_seq IS NOT NULL;"
    "CREATE INDEX charges_plans ON charges(instance_id) WHERE meter_seq IS NULL;"
    "CREATE TRIGGER charges_append_only_u BEFORE UPDATE ON charges"
    "  BEGIN SELECT RAISE(ABORT, 'charges are append-only'); END;"
    "CREATE TRIGGER charges_append_only_d BEFORE DELETE ON charges"
    "  BEGIN SELECT RAISE(ABORT, 'charges are append-only'); END;"
    "CREATE INDEX events_user ON events(user_id, seq);"
    "INSERT INTO accounts (id, user_id, balance_micros, created_at)"
    "  VALUES ('system:revenue', NULL, 0, CAST(strftime('%s', 'now') AS INTEGER))"
    "  ON CONFLICT (id) DO NOTHING;",

    /* 4: service ports (DESIGN.md section 5) */
    "CREATE TABLE instance_ports ("
    "  instance_id TEXT NOT NULL,"
    "  port INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),"
    "  public INTEGER NOT NULL DEFAULT 0,"
    "  created_at INTEGER NOT NULL,"
    /* the access link's secret (?suanli_token=), per instance and port */
    "  token TEXT NOT NULL DEFAULT '',"
    /* '' or 'jupyter': what the node starts on the port, with app_token */
    "  app TEXT NOT NULL DEFAULT '',"
    "  app_token TEXT NOT NULL DEFAULT '',"
    "  PRIMARY KEY (instance_id, port));"
    /* when a request last passed the node's proxy (written at most every 10 s) */
    "ALTER TABLE instances ADD COLUMN last_http_at INTEGER;",

    /* 5: stop from inside, scheduled stop, idle stop (DESIGN.md section 5) */
    "ALTER TABLE instances ADD COLUMN stop_at INTEGER;"
    /* idle stop: NULL follows the owner's default, 0 is off, else seconds */
    "ALTER TABLE instances ADD COLUMN idle_stop_after INTEGER;"
    /* the start of the current idle period as the node's reports show it */
    "ALTER TABLE instances ADD COLUMN idle_since INTEGER;"
    "ALTER TABLE instances ADD COLUMN idle_warned INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE users ADD COLUMN idle_stop_default INTEGER NOT NULL DEFAULT 0;"
    "CREATE INDEX instances_stop_at ON instances (stop_at) WHERE stop_at IS NOT NULL;",

    /* 6: the renter boundary (docs/design/threat-model.md) */
    /* join tokens are single-use unless created with more uses; NULL: the
     * tokens made before this migration, reusable until they expire */
    "ALTER TABLE join_tokens ADD COLUMN max_uses INTEGER;"
    "ALTER TABLE join_tokens ADD COLUMN uses INTEGER NOT NULL DEFAULT 0;"
    /* what a node needs to set the root password: a crypt(3) hash; the
     * plaintext (shown to the owner) is sealed with the store's key */
    "ALTER TABLE instances ADD COLUMN root_password_crypt TEXT NOT NULL DEFAULT '';"
    /* a plan's pay-as-you-go rate when bought: leaving early charges the
     * time used at it (never a discount path) */
    "ALTER TABLE instances ADD COLUMN plan_hourly_micros INTEGER NOT NULL DEFAULT 0;"
    /* what a host can hold for instance disks: its data directory's free
     * bytes plus what the instance disk files already take (they are
     * sparse); placement keeps the disks promised within it */
    "ALTER TABLE nodes ADD COLUMN disk_free_bytes INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE nodes ADD COLUMN instance_disks_bytes INTEGER NOT NULL DEFAULT 0;"
    /* per-address rate limits that are not login failures (registrations) */
    "CREATE TABLE rate_events ("
    "  subject TEXT NOT NULL,"
    "  at INTEGER NOT NULL);"
    "CREATE INDEX rate_events_subject ON rate_events(subject, at);",

    /* 7: names are unique per renter among instances not released
     * (docs/design/instances.md, "Names"). Instances made before may share
     * a name: each later one keeps its name and records the older one it
     * shares it with, and stays out of the index, which therefore always
     * builds; placement refuses a new duplicate of any of them. */
    "ALTER TABLE instances ADD COLUMN name_shared_with TEXT;"
    "UPDATE instances SET name_shared_with = (SELECT o.id FROM instances o"
    "  WHERE o.user_id = instances.user_id AND o.name = instances.name"
    "  AND o.state != 'released' AND o.seq < instances.seq ORDER BY o.seq LIMIT 1)"
    "  WHERE state != 'released';"
    "CREATE UNIQUE INDEX instances_user_name ON instances(user_id, name)"
    "  WHERE state != 'released' AND name_shared_with IS NULL;",

    /* 8: the tables keyed by a text id get a `seq` that lists page by
     * (store.h: portable SQL pages by an explicit integer column, never
     * rowid). SQLite cannot add an AUTOINCREMENT column to a table, so
     * here it copies the rowid, and a trigger gives each new row its own;
     * a PostgreSQL schema declares the column an identity instead. Inserts
     * never name it. */
    "ALTER TABLE users ADD COLUMN seq INTEGER;"
    "UPDATE users SET seq = rowid;"
    "CREATE UNIQUE INDEX users_seq ON users(seq);"
    "CREATE TRIGGER users_seq AFTER INSERT ON users BEGIN"
    "  UPDATE users SET seq = NEW.rowid WHERE rowid = NEW.rowid; END;"
    "ALTER TABLE tokens ADD COLUMN seq INTEGER;"
    "UPDATE tokens SET seq = rowid;"
    "CREATE UNIQUE INDEX tokens_seq ON tokens(seq);"
    "CREATE TRIGGER tokens_seq AFTER INSERT ON tokens BEGIN"
    "  UPDATE tokens SET seq = NEW.rowid WHERE rowid = NEW.rowid; END;"
    "ALTER TABLE ssh_keys ADD COLUMN seq INTEGER;"
    "UPDATE ssh_keys SET seq = rowid;"
    "CREATE UNIQUE INDEX ssh_keys_seq ON ssh_keys(seq);"
    "CREATE TRIGGER ssh_keys_seq AFTER INSERT ON ssh_keys BEGIN"
    "  UPDATE ssh_keys SET seq = NEW.rowid WHERE rowid = NEW.rowid; END;"
    "ALTER TABLE join_tokens ADD COLUMN seq INTEGER;"
    "UPDATE join_tokens SET seq = rowid;"
    "CREATE UNIQUE INDEX join_tokens_seq ON join_tokens(seq);"
    "CREATE TRIGGER join_tokens_seq AFTER INSERT ON join_tokens BEGIN"
    "  UPDATE join_tokens SET seq = NEW.rowid WHERE rowid = NEW.rowid; END;"
    "ALTER TABLE nodes ADD COLUMN seq INTEGER;"
    "UPDATE nodes SET seq = rowid;"
    "CREATE UNIQUE INDEX nodes_seq ON nodes(seq);"
    "CREATE TRIGGER nodes_seq AFTER INSERT ON nodes BEGIN"
    "  UPDATE nodes SET seq = NEW.rowid WHERE rowid = NEW.rowid; END;"
    "ALTER TABLE images ADD COLUMN seq INTEGER;"
    "UPDATE images SET seq = rowid;"
    "CREATE UNIQUE INDEX images_seq ON images(seq);"
    "CREATE TRIGGER images_seq AFTER INSERT ON images BEGIN"
    "  UPDATE images SET seq = NEW.rowid WHERE rowid = NEW.rowid; END;",

    /* 9: a fleet (issue 12). An operator cordons a host (no placement, no
     * start that needs its GPUs again) or drains it (cordoned, and its
     * pay-as-you-go instances stopped); a host silent past nodes.lost_after
     * is lost (lost_at: when that was noticed, for its events); a removed
     * host keeps its row for the instances' history, with a token hash no
     * token has (docs/operations.md, "A fleet"). */
    "ALTER TABLE nodes ADD COLUMN cordoned_at INTEGER;"
    "ALTER TABLE nodes ADD COLUMN draining_at INTEGER;"
    "ALTER TABLE nodes ADD COLUMN cordon_reason TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE nodes ADD COLUMN lost_at INTEGER;"
    "ALTER TABLE nodes ADD COLUMN removed_at INTEGER;"
    /* offers per host (docs/design/control-plane.md, "Offers per host"):
     * an instance's CPU and memory, fixed when it is placed at its GPUs'
     * share of the host. Instances made before get their GPUs' share of the
     * host as it reported itself, never more than the catalog promised. */
    "ALTER TABLE instances ADD COLUMN cpu_millicores INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE instances ADD COLUMN memory_mib INTEGER NOT NULL DEFAULT 0;"
    "UPDATE instances SET"
    "  cpu_millicores = gpus * COALESCE((SELECT CASE WHEN n.cpu_cores > 0 THEN"
    "    MIN(m.cpu_cores_per_gpu * 1000, n.cpu_cores * 1000 / MAX(1, (SELECT COUNT(*)"
    "    FROM gpus g WHERE g.node_id = n.id))) ELSE m.cpu_cores_per_gpu * 1000 END"
    "    FROM gpu_models m, nodes n WHERE m.id = instances.gpu_model_id"
    "    AND n.id = instances.node_id), 1000),"
    "  memory_mib = gpus * COALESCE((SELECT CASE WHEN n.memory_mib > 0 THEN"
    "    MIN(m.memory_mib_per_gpu, n.memory_mib / MAX(1, (SELECT COUNT(*)"
    "    FROM gpus g WHERE g.node_id = n.id))) ELSE m.memory_mib_per_gpu END"
    "    FROM gpu_models m, nodes n WHERE m.id = instances.gpu_model_id"
    "    AND n.id = instances.node_id), 1024);"
    /* clones (docs/design/instances.md, "Clones"): a copy of a stopped
     * instance's disks into a new one, agent to agent. token: the one-time
     * transfer token, sealed (for the clone's host); token_hash: its
     * SHA-256 (for the source's host, which checks it). state: copying,
     * done, failed, canceled. A node reports the port it serves copies on. */
    "CREATE TABLE clones ("
    "  instance_id TEXT PRIMARY KEY REFERENCES instances(id),"
    "  source_id TEXT NOT NULL REFERENCES instances(id),"
    "  source_node_id TEXT NOT NULL REFERENCES nodes(id),"
    "  token_hash TEXT NOT NULL,"
    "  token TEXT NOT NULL,"
    "  state TEXT NOT NULL,"
    "  bytes_done INTEGER NOT NULL DEFAULT 0,"
    "  bytes_total INTEGER NOT NULL DEFAULT 0,"
    "  progress_step INTEGER NOT NULL DEFAULT 0,"
    "  message TEXT NOT NULL DEFAULT '',"
    "  created_at INTEGER NOT NULL,"
    "  ended_at INTEGER);"
    "CREATE INDEX clones_source ON clones(source_id, state);"
    "CREATE INDEX clones_source_node ON clones(source_node_id, state);"
    "ALTER TABLE nodes ADD COLUMN transfer_port INTEGER NOT NULL DEFAULT 0;",
    /* 10: migrations (docs/design/instances.md, "Migrate"): a stopped
     * instance's disks copied to another host under its own id; the row
     * moves to the target (node_id, ssh_port) when the copy starts and back
     * when it fails. source_ssh_port: its port there, to move back to.
     * state: copying (the source's host exports the disks), releasing (the
     * copy is verified, or the instance was released: the source's host
     * drops its copy; outcome says which), done, canceled, failed. reason:
     * user or host_drain. */
    "CREATE TABLE migrations ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  instance_id TEXT NOT NULL REFERENCES instances(id),"
    "  source_node_id TEXT NOT NULL REFERENCES nodes(id),"
    "  target_node_id TEXT NOT NULL REFERENCES nodes(id),"
    "  source_ssh_port INTEGER NOT NULL,"
    "  reason TEXT NOT NULL,"
    "  token_hash TEXT NOT NULL,"
    "  token TEXT NOT NULL,"
    "  state TEXT NOT NULL,"
    "  outcome TEXT NOT NULL DEFAULT '',"
    "  bytes_done INTEGER NOT NULL DEFAULT 0,"
    "  bytes_total INTEGER NOT NULL DEFAULT 0,"
    "  progress_step INTEGER NOT NULL DEFAULT 0,"
    "  message TEXT NOT NULL DEFAULT '',"
    "  created_at INTEGER NOT NULL,"
    "  ended_at INTEGER);"
    "CREATE INDEX migrations_instance ON migrations(instance_id, state);"
    "CREATE INDEX migrations_source_node ON migrations(source_node_id, state);"
    /* a drain asked to move stopped instances away (nodes.h) */
    "ALTER TABLE nodes ADD COLUMN drain_migrate INTEGER NOT NULL DEFAULT 0;"
    /* Placement speed (docs/design/control-plane.md, "Placement speed"):
     * the free GPUs of each host and model, kept by triggers on every
     * change of gpus, so placement reads candidate hosts in best-fit order
     * from an index instead of counting every free GPU of every host; and
     * the GPUs an instance holds, found by their instance. A GPU is free
     * when it has a model and no instance. gpu_free is derived from gpus
     * alone (no foreign keys: rows of hosts whose GPUs are gone stay at 0). */
    "CREATE TABLE gpu_free ("
    "  node_id TEXT NOT NULL,"
    "  gpu_model_id TEXT NOT NULL,"
    "  free INTEGER NOT NULL,"
    "  PRIMARY KEY (node_id, gpu_model_id));"
    "CREATE INDEX gpu_free_fit ON gpu_free(gpu_model_id, free, node_id);"
    "INSERT INTO gpu_free (node_id, gpu_model_id, free)"
    "  SELECT node_id, gpu_model_id, SUM(CASE WHEN instance_id IS NULL THEN 1 ELSE 0 END)"
    "  FROM gpus WHERE gpu_model_id IS NOT NULL GROUP BY node_id, gpu_model_id;"
    "CREATE TRIGGER gpus_free_insert AFTER INSERT ON gpus"
    "  WHEN NEW.gpu_model_id IS NOT NULL AND NEW.instance_id IS NULL BEGIN"
    "  INSERT INTO gpu_free (node_id, gpu_model_id, free)"
    "   VALUES (NEW.node_id, NEW.gpu_model_id, 1)"
    "   ON CONFLICT (node_id, gpu_model_id) DO UPDATE SET free = free + 1;"
    "  END;"
    "CREATE TRIGGER gpus_free_delete AFTER DELETE ON gpus"
    "  WHEN OLD.gpu_model_id IS NOT NULL AND OLD.instance_id IS NULL BEGIN"
    "  UPDATE gpu_free SET free = free - 1"
    "   WHERE node_id = OLD.node_id AND gpu_model_id = OLD.gpu_model_id;"
    "  END;"
    "CREATE TRIGGER gpus_free_update AFTER UPDATE OF node_id, gpu_model_id, instance_id ON gpus"
    "  WHEN OLD.node_id IS NOT NEW.node_id OR OLD.gpu_model_id IS NOT NEW.gpu_model_id"
    "   OR (OLD.instance_id IS NULL) != (NEW.instance_id IS NULL) BEGIN"
    "  UPDATE gpu_free SET free = free - 1"
    "   WHERE node_id = OLD.node_id AND gpu_model_id = OLD.gpu_model_id"
    "   AND OLD.instance_id IS NULL;"
    "  INSERT INTO gpu_free (node_id, gpu_model_id, free)"
    "   SELECT NEW.node_id, NEW.gpu_model_id, 1"
    "   WHERE NEW.gpu_model_id IS NOT NULL AND NEW.instance_id IS NULL"
    "   ON CONFLICT (node_id, gpu_model_id) DO UPDATE SET free = free + 1;"
    "  END;"
    "CREATE INDEX gpus_instance ON gpus(instance_id) WHERE instance_id IS NOT NULL;"
    /* a renter's instances held: the limit and the name each placement
     * checks, without reading the renter's released ones */
    "CREATE INDEX instances_user_held ON instances(user_id, name, state)"
    "  WHERE state != 'released';",
    0,
};
