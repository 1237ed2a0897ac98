/* `suanlid migrate --from URI --to URI`: copies an installation's database
 * to an empty PostgreSQL one (store-copy.h; docs/operations.md, "Moving to
 * PostgreSQL"). */
#ifndef SL_MIGRATE_CMD_H
#define SL_MIGRATE_CMD_H

int migrate_main(int argc, char **argv);

#endif
