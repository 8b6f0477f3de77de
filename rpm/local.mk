## rpm/local.mk — the packaging files travel in the release tarball (the
## Debian package is a native one built from it; rpmbuild builds from it),
## and `make rpm` builds binary RPMs from `make dist`'s tarball.
##
##   make rpm                          rpmbuild -bb under ./rpmbuild/
##   make rpm RPMBUILD_FLAGS=--nocheck without the spec's %check (make check)
##   make rpm RPMBUILD_FLAGS="--with cuda"   adds the CUDA plugin packages
##
## Where the rpm database is empty (rpmbuild on Debian), nothing could
## satisfy the BuildRequires: --nodeps is added, and brp-compress (which
## needs bash's read -d; Debian's /bin/sh is dash) is run by bash so that
## the manual pages are compressed as on Fedora.

EXTRA_DIST += rpm/mixprec.spec rpm/rpmlintrc debian build-aux/install-test.sh build-aux/rpm-test.sh \
	build-aux/repro-test.sh build-aux/package-test-lib.sh

RPMBUILD ?= rpmbuild
RPMBUILD_FLAGS ?=
rpm_topdir = $(abs_top_builddir)/rpmbuild

rpm: dist
	$(AM_V_GEN)$(MKDIR_P) $(rpm_topdir) && \
	if test -n "`rpm -qa 2>/dev/null | head -n 1`"; then set --; \
	else set -- --nodeps --define "__brp_compress bash %{_rpmconfigdir}/brp-compress %{?_prefix}"; fi; \
	$(RPMBUILD) -bb "$$@" $(RPMBUILD_FLAGS) \
	  --define "_topdir $(rpm_topdir)" \
	  --define "_sourcedir $(abs_top_builddir)" \
	  $(srcdir)/rpm/mixprec.spec
	@find $(rpm_topdir)/RPMS -name '*.rpm' -newer $(distdir).tar.xz | sort

mostlyclean-local: mostlyclean-rpm
mostlyclean-rpm:
	-rm -rf $(rpm_topdir)

.PHONY: rpm mostlyclean-rpm

# The tarball carries debian/ as a folder: leave out what an in-place
# dpkg-buildpackage leaves behind, and refuse to ship packaging whose
# version disagrees with configure.ac's.
dist-hook: dist-hook-packaging
dist-hook-packaging:
	$(AM_V_at)cd $(distdir)/debian && \
	  rm -rf .debhelper tmp files *.substvars *.debhelper.log debhelper-build-stamp && \
	  for p in `sed -n 's/^Package: //p' control`; do rm -rf "$$p"; done
	$(AM_V_at)deb=`sed -n '1s/^[^ ]* (\([^)-]*\).*/\1/p' $(srcdir)/debian/changelog`; \
	rpm=`sed -n 's/^Version: *//p' $(srcdir)/rpm/mixprec.spec`; \
	if test "x$$deb" != "x$(VERSION)" || test "x$$rpm" != "x$(VERSION)"; then \
	  echo "dist: version $(VERSION) (configure.ac) but debian/changelog has '$$deb' and rpm/mixprec.spec '$$rpm'; update both"; \
	  exit 1; fi

.PHONY: dist-hook-packaging
