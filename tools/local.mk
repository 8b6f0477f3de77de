## tools/local.mk — command-line tools.

bin_PROGRAMS += tools/mixprec-inspect
tools_mixprec_inspect_SOURCES = \
	tools/mixprec-inspect.c \
	tools/inspect-private.h \
	tools/inspect-formats.c \
	tools/inspect-plan.c
tools_mixprec_inspect_LDADD = libmixprec/libmixprec.la $(MIXPREC_DEPS_LIBS)

# --- plugins and features (no argument, or a plugin or feature name)
tools_mixprec_inspect_SOURCES += tools/inspect-plugins.c

# --- configuration (--config FILE)
tools_mixprec_inspect_SOURCES += tools/inspect-config.c

# --- checkpoints (--checkpoint DIR [--verify])
tools_mixprec_inspect_SOURCES += tools/inspect-checkpoint.c

# --- numerics of a run (--numerics DIR [--stat S] [--heatmap FILE]); the
# heat maps are drawn with cairo, which only this tool links
tools_mixprec_inspect_SOURCES += \
	tools/inspect-numerics.c \
	tools/inspect-numerics-read.c \
	tools/inspect-numerics-csv.c \
	tools/inspect-heatmap.c \
	tools/inspect-viridis.h
tools_mixprec_inspect_CFLAGS = $(AM_CFLAGS) $(CAIRO_CFLAGS) $(PROTOBUF_C_CFLAGS) -I$(top_builddir)/tools
tools_mixprec_inspect_LDADD += $(CAIRO_LIBS) $(PROTOBUF_C_LIBS) -lm

# --- TensorBoard event files for --numerics: protoc-c generates the Event
# decoder from tensorboard-event.proto
tools_mixprec_inspect_SOURCES += tools/inspect-numerics-tb.c
EXTRA_DIST += tools/tensorboard-event.proto
if HAVE_PROTOBUF_C
nodist_tools_mixprec_inspect_SOURCES = tools/tensorboard-event.pb-c.c tools/tensorboard-event.pb-c.h
BUILT_SOURCES += tools/tensorboard-event.pb-c.c tools/tensorboard-event.pb-c.h
CLEANFILES += tools/tensorboard-event.pb-c.c tools/tensorboard-event.pb-c.h
tools/tensorboard-event.pb-c.h: tools/tensorboard-event.pb-c.c
tools/tensorboard-event.pb-c.c: $(srcdir)/tools/tensorboard-event.proto
	$(AM_V_GEN)$(MKDIR_P) tools && \
	$(PROTOC_C) --proto_path=$(srcdir)/tools --c_out=tools $(srcdir)/tools/tensorboard-event.proto
endif

# --- mixprec-run: the local launcher (needs GLib/GIO only, not the library)
bin_PROGRAMS += tools/mixprec-run
tools_mixprec_run_SOURCES = \
	tools/mixprec-run.c \
	tools/run-private.h \
	tools/run-relay.c
tools_mixprec_run_LDADD = $(MIXPREC_DEPS_LIBS)
