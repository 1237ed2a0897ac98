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
    /* 11: the browser's terminal (docs/design/access.md, "Terminal"):
     * single-use tickets, stored as SHA-256 hashes, bound to a user, an
     * instance and the console's origin; deleted when presented. */
    "CREATE TABLE terminal_tickets ("
    "  hash TEXT PRIMARY KEY,"
    "  instance_id TEXT NOT NULL REFERENCES instances(id),"
    "  user_id TEXT NOT NULL REFERENCES users(id),"
    "  origin TEXT NOT NULL,"
    "  expires_at INTEGER NOT NULL);"
    "CREATE INDEX terminal_tickets_instance ON terminal_tickets(instance_id, expires_at);"
    /* the operator's bills (GET /v1/admin/bills): a month of all
     * renters' charges, which charges_user (user first) cannot find */
    "CREATE INDEX charges_period ON charges(period_from);"
    /* the console's event stream (docs/design/control-plane.md, "The
     * event stream"): every change to what GET /v1/instances/{id} shows
     * gives the instance a new revision, one counter for all, so a stream
     * finds what changed since its last id. Written by triggers, so no
     * writer can forget it; the columns that change without the view
     * changing (last_http_at, idle_warned, release_warnings) give none,
     * nor does idle_since, which an active instance's every heartbeat
     * moves (the view's idle_since is read when fetched). */
    "CREATE TABLE instance_revisions ("
    "  instance_id TEXT PRIMARY KEY,"
    "  user_id TEXT NOT NULL,"
    "  rev INTEGER NOT NULL);"
    "CREATE INDEX instance_revisions_rev ON instance_revisions(rev);"
    "CREATE INDEX instance_revisions_user ON instance_revisions(user_id, rev);"
    "CREATE TRIGGER instance_rev_insert AFTER INSERT ON instances BEGIN"
    "  INSERT INTO instance_revisions (instance_id, user_id, rev)"
    "   VALUES (NEW.id, NEW.user_id, (SELECT COALESCE(MAX(rev), 0) + 1 FROM instance_revisions))"
    "  ON CONFLICT (instance_id) DO UPDATE SET rev = excluded.rev;"
    "  END;"
    "CREATE TRIGGER instance_rev_update AFTER UPDATE ON instances"
    "  WHEN OLD.name IS NOT NEW.name OR OLD.node_id IS NOT NEW.node_id"
    "   OR OLD.gpus IS NOT NEW.gpus OR OLD.image IS NOT NEW.image"
    "   OR OLD.state IS NOT NEW.state OR OLD.desired IS NOT NEW.desired"
    "   OR OLD.mode IS NOT NEW.mode OR OLD.plan IS NOT NEW.plan"
    "   OR OLD.cpu_millicores IS NOT NEW.cpu_millicores OR OLD.memory_mib IS NOT NEW.memory_mib"
    "   OR OLD.system_disk_gib IS NOT NEW.system_disk_gib"
    "   OR OLD.data_disk_gib IS NOT NEW.data_disk_gib OR OLD.ssh_port IS NOT NEW.ssh_port"
    "   OR OLD.root_password IS NOT NEW.root_password"
    "   OR OLD.state_message IS NOT NEW.state_message OR OLD.updated_at IS NOT NEW.updated_at"
    "   OR OLD.plan_expires_at IS NOT NEW.plan_expires_at"
    "   OR OLD.plan_auto_renew IS NOT NEW.plan_auto_renew"
    "   OR OLD.plan_price_micros IS NOT NEW.plan_price_micros"
    "   OR OLD.stopped_at IS NOT NEW.stopped_at OR OLD.released_at IS NOT NEW.released_at"
    "   OR OLD.stop_at IS NOT NEW.stop_at OR OLD.idle_stop_after IS NOT NEW.idle_stop_after"
    "   BEGIN"
    "  INSERT INTO instance_revisions (instance_id, user_id, rev)"
    "   VALUES (NEW.id, NEW.user_id, (SELECT COALESCE(MAX(rev), 0) + 1 FROM instance_revisions))"
    "  ON CONFLICT (instance_id) DO UPDATE SET rev = excluded.rev;"
    "  END;"
    "CREATE TRIGGER instance_rev_event AFTER INSERT ON events BEGIN"
    "  INSERT INTO instance_revisions (instance_id, user_id, rev)"
    "   VALUES (NEW.instance_id, NEW.user_id,"
    "    (SELECT COALESCE(MAX(rev), 0) + 1 FROM instance_revisions))"
    "  ON CONFLICT (instance_id) DO UPDATE SET rev = excluded.rev;"
    "  END;"
    "CREATE TRIGGER instance_rev_ports_i AFTER INSERT ON instance_ports BEGIN"
    "  INSERT INTO instance_revisions (instance_id, user_id, rev)"
    "   SELECT i.id, i.user_id, (SELECT COALESCE(MAX(rev), 0) + 1 FROM instance_revisions)"
    "   FROM instances i WHERE i.id = NEW.instance_id"
    "  ON CONFLICT (instance_id) DO UPDATE SET rev = excluded.rev;"
    "  END;"
    "CREATE TRIGGER instance_rev_ports_u AFTER UPDATE ON instance_ports BEGIN"
    "  INSERT INTO instance_revisions (instance_id, user_id, rev)"
    "   SELECT i.id, i.user_id, (SELECT COALESCE(MAX(rev), 0) + 1 FROM instance_revisions)"
    "   FROM instances i WHERE i.id = NEW.instance_id"
    "  ON CONFLICT (instance_id) DO UPDATE SET rev = excluded.rev;"
    "  END;"
    "CREATE TRIGGER instance_rev_ports_d AFTER DELETE ON instance_ports BEGIN"
    "  INSERT INTO instance_revisions (instance_id, user_id, rev)"
    "   SELECT i.id, i.user_id, (SELECT COALESCE(MAX(rev), 0) + 1 FROM instance_revisions)"
    "   FROM instances i WHERE i.id = OLD.instance_id"
    "  ON CONFLICT (instance_id) DO UPDATE SET rev = excluded.rev;"
    "  END;"
    "CREATE TRIGGER instance_rev_meters_i AFTER INSERT ON meters BEGIN"
    "  INSERT INTO instance_revisions (instance_id, user_id, rev)"
    "   SELECT i.id, i.user_id, (SELECT COALESCE(MAX(rev), 0) + 1 FROM instance_revisions)"
    "   FROM instances i WHERE i.id = NEW.instance_id"
    "  ON CONFLICT (instance_id) DO UPDATE SET rev = excluded.rev;"
    "  END;"
    "CREATE TRIGGER instance_rev_meters_u AFTER UPDATE OF charged_micros, ended_at ON meters BEGIN"
    "  INSERT INTO instance_revisions (instance_id, user_id, rev)"
    "   SELECT i.id, i.user_id, (SELECT COALESCE(MAX(rev), 0) + 1 FROM instance_revisions)"
    "   FROM instances i WHERE i.id = NEW.instance_id"
    "  ON CONFLICT (instance_id) DO UPDATE SET rev = excluded.rev;"
    "  END;"
    "CREATE TRIGGER instance_rev_charges AFTER INSERT ON charges BEGIN"
    "  INSERT INTO instance_revisions (instance_id, user_id, rev)"
    "   SELECT i.id, i.user_id, (SELECT COALESCE(MAX(rev), 0) + 1 FROM instance_revisions)"
    "   FROM instances i WHERE i.id = NEW.instance_id"
    "  ON CONFLICT (instance_id) DO UPDATE SET rev = excluded.rev;"
    "  END;"
    "CREATE TRIGGER instance_rev_gpus AFTER UPDATE OF instance_id ON gpus BEGIN"
    "  INSERT INTO instance_revisions (instance_id, user_id, rev)"
    "   SELECT i.id, i.user_id, (SELECT COALESCE(MAX(rev), 0) + 1 FROM instance_revisions)"
    "   FROM instances i WHERE i.id IN (OLD.instance_id, NEW.instance_id)"
    "  ON CONFLICT (instance_id) DO UPDATE SET rev = excluded.rev;"
    "  END;"
    "CREATE TRIGGER instance_rev_clones_i AFTER INSERT ON clones BEGIN"
    "  INSERT INTO instance_revisions (instance_id, user_id, rev)"
    "   SELECT i.id, i.user_id, (SELECT COALESCE(MAX(rev), 0) + 1 FROM instance_revisions)"
    "   FROM instances i WHERE i.id = NEW.instance_id"
    "  ON CONFLICT (instance_id) DO UPDATE SET rev = excluded.rev;"
    "  END;"
    "CREATE TRIGGER instance_rev_clones_u AFTER UPDATE ON clones BEGIN"
    "  INSERT INTO instance_revisions (instance_id, user_id, rev)"
    "   SELECT i.id, i.user_id, (SELECT COALESCE(MAX(rev), 0) + 1 FROM instance_revisions)"
    "   FROM instances i WHERE i.id = NEW.instance_id"
    "  ON CONFLICT (instance_id) DO UPDATE SET rev = excluded.rev;"
    "  END;"
    "CREATE TRIGGER instance_rev_migrations_i AFTER INSERT ON migrations BEGIN"
    "  INSERT INTO instance_revisions (instance_id, user_id, rev)"
    "   SELECT i.id, i.user_id, (SELECT COALESCE(MAX(rev), 0) + 1 FROM instance_revisions)"
    "   FROM instances i WHERE i.id = NEW.instance_id"
    "  ON CONFLICT (instance_id) DO UPDATE SET rev = excluded.rev;"
    "  END;"
    "CREATE TRIGGER instance_rev_migrations_u AFTER UPDATE ON migrations BEGIN"
    "  INSERT INTO instance_revisions (instance_id, user_id, rev)"
    "   SELECT i.id, i.user_id, (SELECT COALESCE(MAX(rev), 0) + 1 FROM instance_revisions)"
    "   FROM instances i WHERE i.id = NEW.instance_id"
    "  ON CONFLICT (instance_id) DO UPDATE SET rev = excluded.rev;"
    "  END;"
    "CREATE TRIGGER instance_rev_nodes AFTER UPDATE ON nodes"
    "  WHEN OLD.address IS NOT NEW.address OR OLD.cordoned_at IS NOT NEW.cordoned_at"
    "   OR OLD.draining_at IS NOT NEW.draining_at OR OLD.lost_at IS NOT NEW.lost_at BEGIN"
    "  INSERT INTO instance_revisions (instance_id, user_id, rev)"
    "   SELECT i.id, i.user_id, (SELECT COALESCE(MAX(rev), 0) + 1 FROM instance_revisions)"
    "   FROM instances i WHERE i.node_id = NEW.id AND i.state != 'released'"
    "  ON CONFLICT (instance_id) DO UPDATE SET rev = excluded.rev;"
    "  END;"
    "CREATE TRIGGER instance_rev_users AFTER UPDATE OF idle_stop_default ON users"
    "  WHEN OLD.idle_stop_default IS NOT NEW.idle_stop_default BEGIN"
    "  INSERT INTO instance_revisions (instance_id, user_id, rev)"
    "   SELECT i.id, i.user_id, (SELECT COALESCE(MAX(rev), 0) + 1 FROM instance_revisions)"
    "   FROM instances i WHERE i.user_id = NEW.id AND i.state != 'released'"
    "  ON CONFLICT (instance_id) DO UPDATE SET rev = excluded.rev;"
    "  END;",
    /* 12: whether a node's agent serves the browser's terminal (its
     * heartbeat says; an instance shows it, and a ticket for one on a node
     * that does not is refused) */
    "ALTER TABLE nodes ADD COLUMN terminals INTEGER NOT NULL DEFAULT 0;"
    "DROP TRIGGER instance_rev_nodes;"
    "CREATE TRIGGER instance_rev_nodes AFTER UPDATE ON nodes"
    "  WHEN OLD.address IS NOT NEW.address OR OLD.cordoned_at IS NOT NEW.cordoned_at"
    "   OR OLD.draining_at IS NOT NEW.draining_at OR OLD.lost_at IS NOT NEW.lost_at"
    "   OR OLD.terminals IS NOT NEW.terminals BEGIN"
    "  INSERT INTO instance_revisions (instance_id, user_id, rev)"
    "   SELECT i.id, i.user_id, (SELECT COALESCE(MAX(rev), 0) + 1 FROM instance_revisions)"
    "   FROM instances i WHERE i.node_id = NEW.id AND i.state != 'released'"
    "  ON CONFLICT (instance_id) DO UPDATE SET rev = excluded.rev;"
    "  END;"
    /* public data (issue 14): datasets an operator publishes, read-only at
     * /root/public in every instance of their region (or of all: region_id
     * ''); source 'sha256:<hex>' (an uploaded tar) or 'path:/abs' (a
     * directory each host has); nodes report what they hold */
    "CREATE TABLE datasets ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  name TEXT NOT NULL UNIQUE,"
    "  region_id TEXT NOT NULL DEFAULT '',"
    "  description TEXT NOT NULL DEFAULT '',"
    "  source TEXT NOT NULL,"
    "  upload_bytes INTEGER NOT NULL DEFAULT 0,"
    "  created_by TEXT,"
    "  created_at INTEGER NOT NULL);"
    "CREATE TABLE node_datasets ("
    "  node_id TEXT NOT NULL REFERENCES nodes(id),"
    "  name TEXT NOT NULL,"
    "  state TEXT NOT NULL,"
    "  size_bytes INTEGER NOT NULL DEFAULT 0,"
    "  message TEXT NOT NULL DEFAULT '',"
    "  updated_at INTEGER NOT NULL,"
    "  PRIMARY KEY (node_id, name));",
    /* 13: saved images and file storage (issue 14) */
    /* whether any host holds an image ready, asked at every placement
     * (sched.c, check_image): an index, not a scan of every host's row */
    "CREATE INDEX node_images_name_state ON node_images(name, state);"
    /* file storage: each region's backend (none: local, the default
     * quota), and one directory per renter and region, named by its
     * number, never by anything the renter chose; nodes report its use */
    "CREATE TABLE storage_backends ("
    "  region_id TEXT PRIMARY KEY REFERENCES regions(id),"
    "  kind TEXT NOT NULL CHECK (kind IN ('local', 'mount', 'glusterfs')),"
    "  spec TEXT NOT NULL DEFAULT '',"
    "  quota_gib INTEGER NOT NULL CHECK (quota_gib > 0),"
    "  updated_at INTEGER NOT NULL);"
    "CREATE TABLE storage_dirs ("
    "  number INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  user_id TEXT NOT NULL REFERENCES users(id),"
    "  region_id TEXT NOT NULL,"
    "  used_bytes INTEGER NOT NULL DEFAULT 0,"
    "  size_bytes INTEGER NOT NULL DEFAULT 0,"
    "  used_at INTEGER,"
    "  created_at INTEGER NOT NULL,"
    "  UNIQUE (user_id, region_id));"
    /* saved images (api-images.c): the image it was saved over, the
     * instance it is saved from while the host captures it, the capture's
     * state ('saving', 'failed', '' once uploaded) and the new layer's bytes */
    "ALTER TABLE images ADD COLUMN parent TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE images ADD COLUMN source_instance TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE images ADD COLUMN save_state TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE images ADD COLUMN save_message TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE images ADD COLUMN layer_bytes INTEGER NOT NULL DEFAULT 0;"
    "CREATE TABLE image_shares ("
    "  image TEXT NOT NULL,"
    "  user_id TEXT NOT NULL,"
    "  PRIMARY KEY (image, user_id));"
    /* notifications (notify.h): a renter's channels (a webhook's secret
     * sealed, an email's confirmation code hashed), the kinds they turned
     * off, the events table's position already fanned out (starting at
     * the newest event: history is never sent), the digest per instance
     * and kind, and the deliveries, which are also the log */
    "CREATE TABLE notify_channels ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  id TEXT NOT NULL UNIQUE,"
    "  user_id TEXT NOT NULL REFERENCES users(id),"
    "  kind TEXT NOT NULL CHECK (kind IN ('webhook', 'email')),"
    "  target TEXT NOT NULL,"
    "  secret TEXT NOT NULL DEFAULT '',"
    "  confirm_hash TEXT NOT NULL DEFAULT '',"
    "  confirm_tries INTEGER NOT NULL DEFAULT 0,"
    "  confirmed INTEGER NOT NULL DEFAULT 0,"
    "  created_at INTEGER NOT NULL);"
    "CREATE INDEX notify_channels_user ON notify_channels(user_id, seq);"
    "CREATE TABLE notify_optouts ("
    "  user_id TEXT NOT NULL,"
    "  kind TEXT NOT NULL,"
    "  PRIMARY KEY (user_id, kind));"
    "CREATE TABLE notify_cursor ("
    "  id INTEGER PRIMARY KEY CHECK (id = 1),"
    "  event_seq INTEGER NOT NULL);"
    "INSERT INTO notify_cursor (id, event_seq) SELECT 1, COALESCE(MAX(seq), 0) FROM events;"
    "CREATE TABLE notify_digests ("
    "  user_id TEXT NOT NULL,"
    "  instance_id TEXT NOT NULL,"
    "  kind TEXT NOT NULL,"
    "  sent_at INTEGER NOT NULL,"
    "  held INTEGER NOT NULL DEFAULT 0,"
    "  PRIMARY KEY (user_id, instance_id, kind));"
    "CREATE TABLE notify_deliveries ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  id TEXT NOT NULL UNIQUE,"
    "  user_id TEXT NOT NULL,"
    "  channel_id TEXT NOT NULL,"
    "  event_seq INTEGER NOT NULL DEFAULT 0,"
    "  kind TEXT NOT NULL,"
    "  instance_id TEXT NOT NULL DEFAULT '',"
    "  state TEXT NOT NULL"
    "    CHECK (state IN ('pending', 'retrying', 'sent', 'failed', 'digested')),"
    "  attempts INTEGER NOT NULL DEFAULT 0,"
    "  next_at INTEGER NOT NULL DEFAULT 0,"
    "  last_error TEXT NOT NULL DEFAULT '',"
    "  subject TEXT NOT NULL DEFAULT '',"
    "  body TEXT NOT NULL DEFAULT '',"
    "  created_at INTEGER NOT NULL,"
    "  updated_at INTEGER NOT NULL);"
    "CREATE INDEX notify_deliveries_due ON notify_deliveries(next_at)"
    "  WHERE state IN ('pending', 'retrying');"
    "CREATE INDEX notify_deliveries_user ON notify_deliveries(user_id, seq);"
    "CREATE INDEX notify_deliveries_created ON notify_deliveries(created_at);",
    /* 14: renter-wide meters (docs/design/billing.md, "Storage meters"):
     * file storage per renter and region, saved-image storage per renter.
     * They belong to no instance and no host (instance_id and node_id ''),
     * a file storage meter names its region, and the item check grows.
     * SQLite cannot alter a CHECK: the table is rebuilt with every row, its
     * AUTOINCREMENT position (charges name meters by seq), its indexes and
     * the triggers on it. */
    "CREATE TABLE meters_new ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  instance_id TEXT NOT NULL DEFAULT '',"
    "  user_id TEXT NOT NULL,"
    "  node_id TEXT NOT NULL DEFAULT '',"
    "  region_id TEXT NOT NULL DEFAULT '',"
    "  item TEXT NOT NULL CHECK (item IN ('gpu', 'nogpu', 'data_disk', 'file_storage',"
    "    'image_storage')),"
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
    "  CHECK (settled_until >= started_at),"
    "  CHECK ((item IN ('file_storage', 'image_storage') AND instance_id = '' AND node_id = '')"
    "    OR (item IN ('gpu', 'nogpu', 'data_disk') AND instance_id != '')));"
    "INSERT INTO meters_new (seq, instance_id, user_id, node_id, item, quantity,"
    "  unit_price_micros, amount_micros, period_s, started_at, ended_at, settled_until,"
    "  charged_micros, settlements)"
    " SELECT seq, instance_id, user_id, node_id, item, quantity, unit_price_micros,"
    "  amount_micros, period_s, started_at, ended_at, settled_until, charged_micros,"
    "  settlements FROM meters ORDER BY seq;"
    "DELETE FROM sqlite_sequence WHERE name = 'meters_new';"
    "INSERT INTO sqlite_sequence (name, seq) SELECT 'meters_new', seq FROM sqlite_sequence"
    "  WHERE name = 'meters';"
    "DROP TABLE meters;"
    "ALTER TABLE meters_new RENAME TO meters;"
    "CREATE INDEX meters_instance ON meters(instance_id, seq);"
    "CREATE INDEX meters_node ON meters(node_id) WHERE ended_at IS NULL;"
    "CREATE INDEX meters_user ON meters(user_id) WHERE ended_at IS NULL;"
    "CREATE INDEX meters_unsettled ON meters(seq)"
    "  WHERE ended_at IS NOT NULL AND settled_until < ended_at;"
    /* one open renter-wide meter per renter, item and region */
    "CREATE UNIQUE INDEX meters_renter_open ON meters(user_id, item, region_id)"
    "  WHERE ended_at IS NULL AND instance_id = '';"
    /* a renter's own list of them (GET /v1/meters) */
    "CREATE INDEX meters_renter ON meters(user_id, seq) WHERE instance_id = '';"
    "CREATE TRIGGER instance_rev_meters_i AFTER INSERT ON meters BEGIN"
    "  INSERT INTO instance_revisions (instance_id, user_id, rev)"
    "   SELECT i.id, i.user_id, (SELECT COALESCE(MAX(rev), 0) + 1 FROM instance_revisions)"
    "   FROM instances i WHERE i.id = NEW.instance_id"
    "  ON CONFLICT (instance_id) DO UPDATE SET rev = excluded.rev;"
    "  END;"
    /* a settlement's charged_micros and charges row bump no revision row
     * by row: two trigger runs per settlement made a pass over 20,000
     * meters 5 times slower; the settlement bumps its chunk's instances in
     * one statement (billing-meter.c, settle_chunk). A plan's charges
     * (no meter) still bump theirs. */
    "CREATE TRIGGER instance_rev_meters_u AFTER UPDATE OF ended_at ON meters BEGIN"
    "  INSERT INTO instance_revisions (instance_id, user_id, rev)"
    "   SELECT i.id, i.user_id, (SELECT COALESCE(MAX(rev), 0) + 1 FROM instance_revisions)"
    "   FROM instances i WHERE i.id = NEW.instance_id"
    "  ON CONFLICT (instance_id) DO UPDATE SET rev = excluded.rev;"
    "  END;"
    "DROP TRIGGER instance_rev_charges;"
    "CREATE TRIGGER instance_rev_charges AFTER INSERT ON charges WHEN NEW.meter_seq IS NULL BEGIN"
    "  INSERT INTO instance_revisions (instance_id, user_id, rev)"
    "   SELECT i.id, i.user_id, (SELECT COALESCE(MAX(rev), 0) + 1 FROM instance_revisions)"
    "   FROM instances i WHERE i.id = NEW.instance_id"
    "  ON CONFLICT (instance_id) DO UPDATE SET rev = excluded.rev;"
    "  END;"
    /* metrics per instance (server/instance-metrics.h, docs/design/metrics.md):
     * tier 0 a sample per 10 s slot for a day, tier 1 per 5 minutes the
     * sum, peak and count of every sample for a month; the latest sample
     * of each instance and the series it lacks, with why */
    "CREATE TABLE instance_metrics ("
    "  instance_id TEXT NOT NULL,"
    "  tier INTEGER NOT NULL CHECK (tier IN (0, 1)),"
    "  t INTEGER NOT NULL,"
    "  n INTEGER NOT NULL,"
    "  data TEXT NOT NULL,"
    "  PRIMARY KEY (instance_id, tier, t));"
    "CREATE INDEX instance_metrics_age ON instance_metrics(tier, t);"
    "CREATE TABLE instance_metrics_latest ("
    "  instance_id TEXT PRIMARY KEY,"
    "  node_id TEXT NOT NULL,"
    "  t INTEGER NOT NULL,"
    "  data TEXT NOT NULL,"
    "  absent TEXT NOT NULL);"
    /* hints (server/hints.h): per instance and kind, since when its
     * condition holds and when it was shown (NULL: not yet) */
    "CREATE TABLE instance_hints ("
    "  instance_id TEXT NOT NULL,"
    "  kind TEXT NOT NULL,"
    "  since INTEGER NOT NULL,"
    "  shown_at INTEGER,"
    "  message TEXT NOT NULL DEFAULT '',"
    "  PRIMARY KEY (instance_id, kind));",
    /* 15: the instances a ledger transaction charged, for the event
     * stream (event-stream.c, add_charged): a settlement no longer bumps
     * their revisions. And the ended meters not settled to their end are
     * marked (unsettled, kept by a trigger on ended_at and by the
     * settlement): an index whose condition names settled_until, which
     * every settlement changes, made each of PostgreSQL's updates of a
     * meter a new row in every index of the table (no HOT update) */
    "CREATE INDEX charges_txn ON charges(txn_id);"
    "ALTER TABLE meters ADD COLUMN unsettled INTEGER NOT NULL DEFAULT 0;"
    "UPDATE meters SET unsettled = 1 WHERE ended_at IS NOT NULL AND settled_until < ended_at;"
    "DROP INDEX meters_unsettled;"
    "CREATE INDEX meters_unsettled ON meters(seq) WHERE unsettled = 1;"
    "CREATE TRIGGER meters_unsettled_end AFTER UPDATE OF ended_at ON meters BEGIN"
    "  UPDATE meters SET unsettled = CASE WHEN NEW.ended_at IS NOT NULL"
    "   AND NEW.settled_until < NEW.ended_at THEN 1 ELSE 0 END WHERE seq = NEW.seq;"
    "  END;",
    /* 16: files of the renter's storage through the console and the API
     * (docs/design/node-runtime.md, "File storage"): a ticket is a
     * terminal's or one file operation's, on a path of the storage */
    "ALTER TABLE terminal_tickets ADD COLUMN kind TEXT NOT NULL DEFAULT 'terminal';"
    "ALTER TABLE terminal_tickets ADD COLUMN path TEXT NOT NULL DEFAULT '';",
    /* 17: PostgreSQL's meters keep half of each page free (store-pg-schema.c);
     * SQLite updates rows in place */
    "SELECT 1;",
    /* 18: a pass moves a host's mark, not each of its meters
     * (docs/design/billing.md, "Marks and days"): an open instance meter
     * is billed to the further of its own billed_until and its host's
     * mark; settled_until and the charges rows reach the last whole UTC
     * day. moves numbers a meter's own moves (the ledger keys
     * settle:X:METER:N), starting past the settlements numbered so far. A
     * mark's gen counts the host's meters opened and ended (a pass moves
     * the mark only if none was since it read them), pass names the pass
     * that moved it last */
    "ALTER TABLE meters ADD COLUMN billed_until INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE meters ADD COLUMN moves INTEGER NOT NULL DEFAULT 0;"
    "UPDATE meters SET billed_until = settled_until, moves = settlements;"
    "CREATE TABLE billing_marks ("
    "  node_id TEXT PRIMARY KEY,"
    "  billed_until INTEGER NOT NULL,"
    "  gen INTEGER NOT NULL DEFAULT 0,"
    "  pass INTEGER NOT NULL DEFAULT 0);",
    0,
};
