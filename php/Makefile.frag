
# ferrolock (Makefile.frag, added by config.m4): cargo builds the extension.
#
# `make` always asks cargo, which knows what is up to date, then copies the
# library it reports to modules/ferrolock.so (the name `extension=ferrolock`
# loads, and the file PIE looks for). `make install` installs what is in
# modules/ and runs cargo only if ferrolock.so is missing, so a
# `sudo make install` after `make` never runs cargo as root.
# CARGO_TARGET_DIR and the other cargo variables are honoured as usual.

FERROLOCK_SO = $(phplibdir)/ferrolock.so
FERROLOCK_ARTIFACTS = $(builddir)/ferrolock-cargo.json

all: ferrolock-cargo
build-modules: $(FERROLOCK_SO)
clean: ferrolock-clean

$(FERROLOCK_SO):
	@$(MAKE) ferrolock-cargo

ferrolock-cargo:
	$(FERROLOCK_CARGO_ENV) $(CARGO) build --release --locked -p ferrolock-php \
		--manifest-path $(srcdir)/Cargo.toml --message-format=json-render-diagnostics \
		> $(FERROLOCK_ARTIFACTS)
	@lib=`sed -n '/"reason":"compiler-artifact"/s/.*"filenames":\["\([^"]*libferrolock_php\.[a-z]*\)".*/\1/p' \
		$(FERROLOCK_ARTIFACTS) | tail -n 1`; \
	if test -z "$$lib"; then \
		echo "cargo reported no libferrolock_php library (see $(FERROLOCK_ARTIFACTS))" >&2; exit 1; \
	fi; \
	$(mkinstalldirs) $(phplibdir) && cp "$$lib" $(FERROLOCK_SO).tmp && mv -f $(FERROLOCK_SO).tmp $(FERROLOCK_SO) && \
	echo "Built $(FERROLOCK_SO) (from $$lib)"

ferrolock-clean:
	rm -f $(FERROLOCK_ARTIFACTS) $(FERROLOCK_SO).tmp

.PHONY: ferrolock-cargo ferrolock-clean
