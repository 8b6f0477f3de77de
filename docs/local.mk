## docs/local.mk — the HTML API reference. gi-docgen renders the doc
## comments that g-ir-scanner put into bindings/Mixprec-1.0.gir, plus the
## conceptual pages below, into docs/reference/html/; `make install`
## copies it to $(docdir)/reference. Built by `make` (and `make docs`)
## when configure found gi-docgen and introspection (--enable-docs).

docs_reference_pages = \
	docs/reference/overview.md \
	docs/reference/step-pipeline.md \
	docs/reference/precision-modes.md \
	docs/reference/fp8-training.md \
	docs/reference/fp8-casts.md \
	docs/reference/fp4-views.md \
	docs/reference/optimizer-states.md \
	docs/reference/zero-and-memory.md \
	docs/reference/memory-representations.md \
	docs/reference/numerics.md \
	docs/reference/internals.md \
	docs/reference/checkpoints.md \
	docs/reference/plugins.md \
	docs/reference/environment.md \
	docs/reference/differences.md \
	docs/reference/internals.md
# The pages' pictures, and the script that writes the run numerics.md draws.
docs_reference_images = docs/reference/numerics-heatmap.png
EXTRA_DIST += \
	$(docs_reference_pages) \
	$(docs_reference_images) \
	docs/reference/numerics-example.py \
	docs/reference/urlmap.js \
	docs/reference/mixprec.toml.in

docs_referencedir = $(docdir)/reference

if ENABLE_DOCS
docs_reference_index = docs/reference/html/index.html

docs/reference/mixprec.toml: $(srcdir)/docs/reference/mixprec.toml.in Makefile
	$(AM_V_GEN)$(MKDIR_P) docs/reference && \
	sed -e 's|@VERSION[@]|$(VERSION)|g' $(srcdir)/docs/reference/mixprec.toml.in >$@.tmp && \
	mv $@.tmp $@

# Warnings are fatal: a broken link in a page or a doc comment fails the
# build. gi-docgen names the Devhelp book after its output folder, so it
# writes into a folder called "reference" (the installed name), which
# becomes html/ once it is complete.
$(docs_reference_index): bindings/Mixprec-1.0.gir docs/reference/mixprec.toml \
		$(addprefix $(srcdir)/,$(docs_reference_pages) $(docs_reference_images) docs/reference/urlmap.js)
	$(AM_V_GEN)rm -rf docs/reference/html docs/reference/html.tmp && \
	$(GI_DOCGEN) generate --quiet --fatal-warnings --no-namespace-dir \
	  --config docs/reference/mixprec.toml \
	  --content-dir $(srcdir)/docs/reference \
	  --add-include-path bindings \
	  --output-dir docs/reference/html.tmp/reference bindings/Mixprec-1.0.gir && \
	mv docs/reference/html.tmp/reference docs/reference/html && \
	rmdir docs/reference/html.tmp

# The reference is built with everything else, and checked by
# tests/test-docs-reference.sh.
TESTS += tests/test-docs-reference.sh
endif
EXTRA_DIST += tests/test-docs-reference.sh

docs: $(docs_reference_index)
	@test -n "$(docs_reference_index)" || \
	  { echo "make docs: configure found no gi-docgen or no introspection;" \
	         "install gi-docgen (build-aux/install-deps.sh) and run configure --enable-docs" >&2; \
	    exit 1; }
all-local: $(docs_reference_index)

install-data-local: install-docs-reference
install-docs-reference: $(docs_reference_index)
	@test -z "$(docs_reference_index)" || { \
	  cd docs/reference/html && \
	  find . -type d | while read -r d; do \
	    $(MKDIR_P) "$(DESTDIR)$(docs_referencedir)/$$d" || exit 1; done && \
	  find . -type f | while read -r f; do \
	    echo " $(INSTALL_DATA) $$f '$(DESTDIR)$(docs_referencedir)/$$f'"; \
	    $(INSTALL_DATA) "$$f" "$(DESTDIR)$(docs_referencedir)/$$f" || exit 1; done; }

uninstall-local: uninstall-docs-reference
uninstall-docs-reference:
	-rm -rf "$(DESTDIR)$(docs_referencedir)"

clean-local: clean-docs-reference
clean-docs-reference:
	-rm -rf docs/reference/html docs/reference/html.tmp
	-rm -f docs/reference/mixprec.toml docs/reference/mixprec.toml.tmp

# Every exported function has a doc comment with a Since: tag (whatever
# the configuration: it reads the built library and the sources).
TESTS += tests/test-api-docs.sh
EXTRA_DIST += tests/test-api-docs.sh

# The example plugin printed in plugins.md compiles, loads and steps.
TESTS += tests/test-docs-plugin-example.sh
EXTRA_DIST += tests/test-docs-plugin-example.sh

.PHONY: docs install-docs-reference uninstall-docs-reference clean-docs-reference
