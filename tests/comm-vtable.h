/* comm-vtable.h — a comm plugin's vtable straight from its module in the
 * build tree, for tests of what the plugin itself checks, before (or
 * without) the library's registry and bootstrap. */
#pragma once

#include <mixprec/mixprec-plugin.h>

/* @plugin: "comm-ucx", "comm-nccl". Loads
 * $MIXPREC_TOP_BUILDDIR/plugins/.libs/mixprec-PLUGIN.so once, runs its
 * init() and returns the communicator it registers; aborts the test when
 * any of that fails. */
const MixprecCommV1 *test_comm_plugin_vtable (const char *plugin);
