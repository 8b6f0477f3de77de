## bindings/local.mk — GObject Introspection data and the Vala API.

-include $(INTROSPECTION_MAKEFILE)
INTROSPECTION_GIRS =
INTROSPECTION_SCANNER_ARGS = --warn-all
INTROSPECTION_SCANNER_ENV = CC="$(CC)"
INTROSPECTION_COMPILER_ARGS = --includedir=$(srcdir)/bindings --includedir=bindings

if HAVE_INTROSPECTION
bindings/Mixprec-1.0.gir: libmixprec/libmixprec.la
bindings_Mixprec_1_0_gir_NAMESPACE = Mixprec
bindings_Mixprec_1_0_gir_VERSION = $(MIXPREC_API_VERSION)
bindings_Mixprec_1_0_gir_LIBS = libmixprec/libmixprec.la
bindings_Mixprec_1_0_gir_FILES = \
	$(addprefix $(srcdir)/,$(filter-out %-private.h,$(filter %.h %.c,$(mixprec_public_headers) $(mixprec_sources)))) \
	$(mixprec_built_public_headers) \
	libmixprec/mixprec-enum-types.c
bindings_Mixprec_1_0_gir_CFLAGS = $(AM_CPPFLAGS) $(MIXPREC_DEPS_CFLAGS) -DMIXPREC_COMPILATION
bindings_Mixprec_1_0_gir_INCLUDES = GObject-2.0 GLib-2.0 Gio-2.0 Json-1.0
bindings_Mixprec_1_0_gir_EXPORT_PACKAGES = mixprec
bindings_Mixprec_1_0_gir_SCANNERFLAGS = \
	--identifier-prefix=Mixprec \
	--symbol-prefix=mixprec \
	--c-include="mixprec/mixprec.h"
INTROSPECTION_GIRS += bindings/Mixprec-1.0.gir

girdir = $(datadir)/gir-1.0
gir_DATA = $(INTROSPECTION_GIRS)
typelibdir = $(libdir)/girepository-1.0
typelib_DATA = $(INTROSPECTION_GIRS:.gir=.typelib)
CLEANFILES += $(gir_DATA) $(typelib_DATA)
endif

if ENABLE_VAPIGEN
vapidir = $(datadir)/vala/vapi
vapi_DATA = bindings/mixprec.vapi bindings/mixprec.deps
bindings/mixprec.vapi: bindings/Mixprec-1.0.gir $(srcdir)/bindings/Mixprec-1.0.metadata
	$(AM_V_GEN)$(VAPIGEN) --library=mixprec --pkg gobject-2.0 --pkg gio-2.0 --pkg json-glib-1.0 \
	  --metadatadir=$(srcdir)/bindings --directory=bindings bindings/Mixprec-1.0.gir
bindings/mixprec.deps: Makefile
	$(AM_V_GEN)$(MKDIR_P) bindings && printf 'glib-2.0\ngobject-2.0\ngio-2.0\njson-glib-1.0\n' > $@
CLEANFILES += bindings/mixprec.vapi bindings/mixprec.deps
endif
EXTRA_DIST += bindings/Mixprec-1.0.metadata

# PyGObject overrides: zero-copy views for `from gi.repository import Mixprec`.
EXTRA_DIST += bindings/gi/overrides/Mixprec.py
if INSTALL_PYOVERRIDES
pyoverrides_DATA = bindings/gi/overrides/Mixprec.py
endif

# The pure-Python package mixprec: mixprec.torch, the PyTorch front
# (imported only when asked for; it needs torch). Installed beside gi.
mixprec_python_files = \
	bindings/python/mixprec/__init__.py \
	bindings/python/mixprec/torch.py \
	bindings/python/mixprec/_torch_zero.py
EXTRA_DIST += $(mixprec_python_files)
if INSTALL_PYOVERRIDES
pymixprec_DATA = $(mixprec_python_files)
endif
