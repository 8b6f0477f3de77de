## man/local.mk — manual pages.
dist_man_MANS += man/mixprec-inspect.1

# --- configuration file format
dist_man_MANS += man/mixprec.json.5

# --- mixprec-run, the local launcher
dist_man_MANS += man/mixprec-run.1

# --- checkpoint format (manifest, shard files, crash safety, export)
dist_man_MANS += man/mixprec-checkpoint.5

# --- the library: concepts, the step pipeline, plugins, environment
dist_man_MANS += man/libmixprec.7

# Every page renders without man or groff warnings at 80 columns, and the
# libmixprec pages they name exist.
TESTS += tests/test-man-pages.sh
EXTRA_DIST += tests/test-man-pages.sh
