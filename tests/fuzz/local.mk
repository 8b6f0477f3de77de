## tests/fuzz/: libFuzzer targets for every parser of outside data. Built
## only in a build of their own (CC=clang ./configure --enable-fuzzers):
## `make fuzzers` builds them, `make fuzz-smoke` runs each for
## FUZZ_SECONDS (default 5) on a copy of its seed corpus (CI),
## tests/fuzz/run-fuzzers.sh runs a longer campaign.
##
## A target is tests/fuzz/fuzz-NAME.c (LLVMFuzzerTestOneInput, with
## fuzz_init() from fuzz-common.h in LLVMFuzzerInitialize) with its seeds in
## tests/fuzz/seeds/NAME/; add it to fuzz_programs and give it the four
## lines of the others below.

fuzz_programs = \
	tests/fuzz/fuzz-config \
	tests/fuzz/fuzz-safetensors \
	tests/fuzz/fuzz-manifest \
	tests/fuzz/fuzz-rank-env \
	tests/fuzz/fuzz-ucx-peer \
	tests/fuzz/fuzz-nccl-peer \
	tests/fuzz/fuzz-bootstrap-wire \
	tests/fuzz/fuzz-handshake
fuzz_ldadd = libmixprec/libmixprec-internal.la $(MIXPREC_DEPS_LIBS) $(PTHREAD_LIBS) -lm
fuzz_cppflags = $(AM_CPPFLAGS) -DMIXPREC_COMPILATION -I$(top_srcdir)/tests/fuzz \
	-I$(top_srcdir)/plugins
fuzz_ldflags = -fsanitize=fuzzer

EXTRA_DIST += tests/fuzz/fuzz-common.h tests/fuzz/run-fuzzers.sh tests/fuzz/seeds \
	$(fuzz_programs:=.c)

if ENABLE_FUZZERS
EXTRA_PROGRAMS += $(fuzz_programs)
CLEANFILES += $(fuzz_programs)

tests_fuzz_fuzz_config_SOURCES = tests/fuzz/fuzz-config.c tests/fuzz/fuzz-common.h
tests_fuzz_fuzz_config_CPPFLAGS = $(fuzz_cppflags)
tests_fuzz_fuzz_config_LDFLAGS = $(fuzz_ldflags)
tests_fuzz_fuzz_config_LDADD = $(fuzz_ldadd)

tests_fuzz_fuzz_safetensors_SOURCES = tests/fuzz/fuzz-safetensors.c tests/fuzz/fuzz-common.h
tests_fuzz_fuzz_safetensors_CPPFLAGS = $(fuzz_cppflags)
tests_fuzz_fuzz_safetensors_LDFLAGS = $(fuzz_ldflags)
tests_fuzz_fuzz_safetensors_LDADD = $(fuzz_ldadd)

tests_fuzz_fuzz_manifest_SOURCES = tests/fuzz/fuzz-manifest.c tests/fuzz/fuzz-common.h
tests_fuzz_fuzz_manifest_CPPFLAGS = $(fuzz_cppflags)
tests_fuzz_fuzz_manifest_LDFLAGS = $(fuzz_ldflags)
tests_fuzz_fuzz_manifest_LDADD = $(fuzz_ldadd)

tests_fuzz_fuzz_rank_env_SOURCES = tests/fuzz/fuzz-rank-env.c tests/fuzz/fuzz-common.h
tests_fuzz_fuzz_rank_env_CPPFLAGS = $(fuzz_cppflags)
tests_fuzz_fuzz_rank_env_LDFLAGS = $(fuzz_ldflags)
tests_fuzz_fuzz_rank_env_LDADD = $(fuzz_ldadd)

# The plugins' parsers of what other ranks send, built here on their own:
# they need neither UCX nor CUDA.
tests_fuzz_fuzz_ucx_peer_SOURCES = tests/fuzz/fuzz-ucx-peer.c tests/fuzz/fuzz-common.h \
	plugins/comm-ucx/ucx-peer.c plugins/comm-ucx/ucx-hint.c
tests_fuzz_fuzz_ucx_peer_CPPFLAGS = $(fuzz_cppflags)
tests_fuzz_fuzz_ucx_peer_LDFLAGS = $(fuzz_ldflags)
tests_fuzz_fuzz_ucx_peer_LDADD = $(fuzz_ldadd)

tests_fuzz_fuzz_nccl_peer_SOURCES = tests/fuzz/fuzz-nccl-peer.c tests/fuzz/fuzz-common.h \
	plugins/comm-nccl/nccl-peer.c
tests_fuzz_fuzz_nccl_peer_CPPFLAGS = $(fuzz_cppflags)
tests_fuzz_fuzz_nccl_peer_LDFLAGS = $(fuzz_ldflags)
tests_fuzz_fuzz_nccl_peer_LDADD = $(fuzz_ldadd)

tests_fuzz_fuzz_bootstrap_wire_SOURCES = tests/fuzz/fuzz-bootstrap-wire.c tests/fuzz/fuzz-common.h
tests_fuzz_fuzz_bootstrap_wire_CPPFLAGS = $(fuzz_cppflags)
tests_fuzz_fuzz_bootstrap_wire_LDFLAGS = $(fuzz_ldflags)
tests_fuzz_fuzz_bootstrap_wire_LDADD = $(fuzz_ldadd)

tests_fuzz_fuzz_handshake_SOURCES = tests/fuzz/fuzz-handshake.c tests/fuzz/fuzz-common.h
tests_fuzz_fuzz_handshake_CPPFLAGS = $(fuzz_cppflags)
tests_fuzz_fuzz_handshake_LDFLAGS = $(fuzz_ldflags)
tests_fuzz_fuzz_handshake_LDADD = $(fuzz_ldadd)

fuzzers: $(BUILT_SOURCES)
	$(MAKE) $(AM_MAKEFLAGS) $(fuzz_programs)

FUZZ_SECONDS = 5
fuzz-smoke: fuzzers
	$(SHELL) $(top_srcdir)/tests/fuzz/run-fuzzers.sh --seconds $(FUZZ_SECONDS) \
	  --seeds $(top_srcdir)/tests/fuzz/seeds $(fuzz_programs)
else
fuzzers fuzz-smoke:
	@echo "the fuzz targets need a build of their own: CC=clang ./configure --enable-fuzzers" >&2; exit 1
endif
.PHONY: fuzzers fuzz-smoke
