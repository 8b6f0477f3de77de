## abi/local.mk — ABI discipline for libmixprec.so: a committed abidiff
## baseline of the released ABI, `make check-abi` against it, and the
## Debian symbols file kept in step with the exported symbols.
##
##   make check-abi       fails when the built library breaks the baseline:
##                        a removed or changed symbol, a changed public type,
##                        a soname that does not follow configure.ac, or an
##                        exported symbol that is not mixprec_*.
##                        Added symbols are compatible and pass.
##   make abi-baseline    rewrites the baseline from the built library. Only
##                        for a release, or when a release deliberately breaks
##                        ABI together with a soname bump (configure.ac's
##                        libtool version), never to silence check-abi.
##   make update-symbols  rewrites debian/libmixprec0.symbols (new symbols get
##                        the current version).
##
## The baseline depends on the architecture's type layout: one file per
## host CPU; check-abi skips, saying so, where none is committed.

abi_baseline = $(top_srcdir)/abi/libmixprec.so.$(MIXPREC_SONAME_MAJOR).$(host_cpu).abi
abi_suppressions = $(top_srcdir)/abi/libmixprec.abignore
abi_library = libmixprec/.libs/libmixprec.so.$(MIXPREC_SONAME_MAJOR)
# The headers as installed: abidw/abidiff keep only the types they declare.
abi_headers_stage = $(abs_top_builddir)/abi-headers
abi_headers_dir = $(abi_headers_stage)$(mixprec_includedir)

# The whole folder: a baseline per CPU, the suppressions and the scripts.
EXTRA_DIST += abi

abi-headers: $(mixprec_include_HEADERS) $(nodist_mixprec_include_HEADERS)
	$(AM_V_GEN)rm -rf $(abi_headers_stage) && \
	$(MAKE) $(AM_MAKEFLAGS) DESTDIR=$(abi_headers_stage) \
	  install-mixprec_includeHEADERS install-nodist_mixprec_includeHEADERS >/dev/null

check-abi: libmixprec/libmixprec.la abi-headers
	$(AM_V_at)ABIDIFF="$(ABIDIFF)" NM="$(NM)" \
	  $(SHELL) $(top_srcdir)/abi/check-abi.sh \
	  "$(abi_library)" "$(abi_baseline)" "$(abi_headers_dir)" "$(abi_suppressions)" \
	  "libmixprec.so.$(MIXPREC_SONAME_MAJOR)"

abi-baseline: libmixprec/libmixprec.la abi-headers
	@if test "x$(ABIDW)" = xno; then \
	  echo "abi-baseline: abidw not found (Debian: apt install abigail-tools); rerun configure"; exit 1; fi
	$(AM_V_GEN)$(ABIDW) --headers-dir $(abi_headers_dir) --drop-private-types \
	  --no-corpus-path --no-comp-dir-path --short-locs --type-id-style hash \
	  --out-file $(abi_baseline).tmp $(abi_library) && \
	mv $(abi_baseline).tmp $(abi_baseline)
	@echo "abi-baseline: wrote $(abi_baseline)"

update-symbols: libmixprec/libmixprec.la
	$(AM_V_GEN)$(SHELL) $(top_srcdir)/abi/update-symbols.sh \
	  "$(abi_library)" "$(top_srcdir)/debian/libmixprec0.symbols" "$(VERSION)"

mostlyclean-local: mostlyclean-abi
mostlyclean-abi:
	-rm -rf $(abi_headers_stage)

.PHONY: abi-headers check-abi abi-baseline update-symbols mostlyclean-abi
