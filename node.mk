# suanli-node: the host agent's library and its end-to-end smoke test
# (tests/smoke/instance-smoke.c). Included from the Makefile
# (`include node.mk`). `make node-smoke` runs it on the bridge
# SUANLI_SMOKE_BRIDGE (default suanli0) and removes the bridge afterwards;
# SUANLI_SMOKE_DIR, SUANLI_SMOKE_SUBNET: see the test's source.

NODE_SRC    := $(filter-out node/main.c,$(wildcard node/*.c))
NODE_OBJ    := $(NODE_SRC:%.c=$(BUILD)/%.o)

$(BUILD)/libsuanli-node.a: $(NODE_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/tests/node-smoke: $(BUILD)/tests/smoke/instance-smoke.o $(BUILD)/libsuanli-node.a \
                           $(BUILD)/libsuanli.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/suanli-node: $(BUILD)/node/main.o $(BUILD)/libsuanli-node.a \
                      $(BUILD)/libsuanli.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

.PHONY: node-smoke
node-smoke: $(BUILD)/tests/node-smoke
	@$(BUILD)/tests/node-smoke; rc=$$?; scripts/cleanup-host-net.sh $${SUANLI_SMOKE_BRIDGE:-suanli0}; \
	exit $$rc

# bench/metrics.py's driver: the metrics collector on N instances' worth of
# real cgroups and disks (bench/metrics-collect.c)
$(BUILD)/bench/metrics-collect: $(BUILD)/bench/metrics-collect.o $(BUILD)/libsuanli-node.a \
                                $(BUILD)/libsuanli.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)
