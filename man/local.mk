## man/local.mk — manual pages.
dist_man_MANS += man/mixprec-inspect.1

# --- configuration file format
dist_man_MANS += man/mixprec.json.5

# --- mixprec-run, the local launcher
dist_man_MANS += man/mixprec-run.1

# --- checkpoint format (manifest, shard files, crash safety, export)
dist_man_MANS += man/mixprec-checkpoint.5
