# suanli-node: the host agent's library and its end-to-end smoke test.
# Included from the Makefile (`include node.mk`), or on its own after it:
#   make -f Makefile -f node.mk BUILD=build-node build-node/tests/node-smoke

NODE_SRC    := $(filter-out node/main.c node/instance-smoke.c,$(wildcard node/*.c))
NODE_OBJ    := $(NODE_SRC:%.c=$(BUILD)/%.o)

$(BUILD)/libsuanli-node.a: $(NODE_OBJ)
	ar rcs $@ $^

$(BUILD)/tests/node-smoke: $(BUILD)/node/instance-smoke.o $(BUILD)/libsuanli-node.a \
                           $(BUILD)/libsuanli.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/suanli-node: $(BUILD)/node/main.o $(BUILD)/libsuanli-node.a $(BUILD)/cli/client.o \
                      $(BUILD)/libsuanli.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

.PHONY: node-smoke
node-smoke: $(BUILD)/tests/node-smoke
	@$(BUILD)/tests/node-smoke; rc=$$?; scripts/cleanup-host-net.sh suanli0; exit $$rc
