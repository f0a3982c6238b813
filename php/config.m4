dnl config.m4 for the ferrolock extension: `phpize && ./configure && make`
dnl (what PIE runs, here in php/, the `build-path` of ../composer.json).
dnl
dnl The extension is Rust (ext-php-rs), so there are no C sources to declare:
dnl configure only finds cargo and libclang (bindgen reads the PHP headers
dnl with it) and writes Makefile.frag's rules, which run
dnl `cargo build --release -p ferrolock-php` and copy the library to
dnl modules/ferrolock.so. `make install` copies that to the extension_dir of
dnl the PHP whose php-config configure used, so `extension=ferrolock` loads it.

PHP_ARG_WITH([cargo],,
  [AS_HELP_STRING([--with-cargo=PATH],
    [Path to cargo (default: $CARGO, else cargo in PATH or ~/.cargo/bin)])],
  [no], [no])

PHP_ARG_WITH([libclang],,
  [AS_HELP_STRING([--with-libclang=DIR],
    [Directory holding libclang (default: $LIBCLANG_PATH, else where bindgen looks)])],
  [no], [no])

dnl --- cargo -----------------------------------------------------------------
if test "$PHP_CARGO" != "no" && test "$PHP_CARGO" != "yes"; then
  CARGO=$PHP_CARGO
fi
AC_PATH_PROG([CARGO], [cargo], [], [$PATH$PATH_SEPARATOR$HOME/.cargo/bin])
if test -z "$CARGO"; then
  AC_MSG_ERROR([cargo not found. ferrolock is written in Rust: install Rust 1.88 or
newer (https://rustup.rs), then put cargo in PATH, set CARGO=/path/to/cargo or
pass --with-cargo=/path/to/cargo.])
fi

dnl The workspace needs Rust 1.88 (edition 2024): say so now rather than
dnl after a failed compile.
AC_MSG_CHECKING([whether cargo is 1.88 or newer])
ferrolock_cargo_version=$("$CARGO" --version 2>/dev/null | sed -n 's/^cargo \([[0-9]]*\.[[0-9]]*\).*/\1/p')
ferrolock_cargo_major=${ferrolock_cargo_version%%.*}
ferrolock_cargo_minor=${ferrolock_cargo_version#*.}
if test -n "$ferrolock_cargo_major" && test -n "$ferrolock_cargo_minor" &&
   { test "$ferrolock_cargo_major" -gt 1 ||
     { test "$ferrolock_cargo_major" -eq 1 && test "$ferrolock_cargo_minor" -ge 88; }; }; then
  AC_MSG_RESULT([yes, $ferrolock_cargo_version])
else
  AC_MSG_RESULT([no])
  AC_MSG_ERROR([$CARGO does not run or is older than 1.88 (it says: $("$CARGO" --version 2>&1 | head -n 1)).
ferrolock needs Rust 1.88 or newer: rustup update, or point CARGO / --with-cargo at a newer one.])
fi

dnl --- libclang ---------------------------------------------------------------
dnl Looked for where clang-sys (bindgen's loader) looks: $LIBCLANG_PATH,
dnl `llvm-config --libdir`, then the usual system directories. Found
dnl elsewhere (--with-libclang), it is handed to cargo as LIBCLANG_PATH.
AC_MSG_CHECKING([for libclang])
ferrolock_libclang=
ferrolock_libclang_env=
ferrolock_has_libclang() {
  for f in "$1"/libclang.so "$1"/libclang-*.so "$1"/libclang.so.* "$1"/libclang-*.so.* "$1"/libclang.dylib; do
    test -f "$f" && return 0
  done
  return 1
}
if test "$PHP_LIBCLANG" != "no" && test "$PHP_LIBCLANG" != "yes"; then
  if ferrolock_has_libclang "$PHP_LIBCLANG"; then
    ferrolock_libclang=$PHP_LIBCLANG
    ferrolock_libclang_env="LIBCLANG_PATH='$PHP_LIBCLANG'"
  else
    AC_MSG_RESULT([no])
    AC_MSG_ERROR([--with-libclang=$PHP_LIBCLANG: no libclang.so or libclang.dylib in that directory.])
  fi
elif test -n "$LIBCLANG_PATH"; then
  if ferrolock_has_libclang "$LIBCLANG_PATH"; then
    ferrolock_libclang=$LIBCLANG_PATH
  else
    AC_MSG_RESULT([no])
    AC_MSG_ERROR([LIBCLANG_PATH=$LIBCLANG_PATH: no libclang.so or libclang.dylib in that directory.])
  fi
else
  ferrolock_llvm_libdir=$("${LLVM_CONFIG_PATH:-llvm-config}" --libdir 2>/dev/null)
  for d in $ferrolock_llvm_libdir \
      /usr/local/llvm*/lib* /usr/local/lib*/*/* /usr/local/lib*/* /usr/local/lib* \
      /usr/lib*/*/* /usr/lib*/* /usr/lib* \
      /usr/local/opt/llvm*/lib/llvm*/lib /usr/local/opt/llvm*/lib /opt/homebrew/opt/llvm*/lib \
      /Library/Developer/CommandLineTools/usr/lib \
      /Applications/Xcode.app/Contents/Developer/Toolchains/XcodeDefault.xctoolchain/usr/lib; do
    if test -d "$d" && ferrolock_has_libclang "$d"; then
      ferrolock_libclang=$d
      break
    fi
  done
fi
if test -z "$ferrolock_libclang"; then
  AC_MSG_RESULT([no])
  AC_MSG_ERROR([libclang not found. Building ferrolock runs bindgen, which needs it:
install libclang-dev (Debian, Ubuntu), clang-devel (Fedora, RHEL), clang (Alpine,
Arch) or llvm (Homebrew), or set LIBCLANG_PATH / pass --with-libclang=DIR naming
the directory that holds libclang.so.])
fi
AC_MSG_RESULT([$ferrolock_libclang])

dnl --- which PHP ------------------------------------------------------------
dnl ext-php-rs builds against $PHP_CONFIG and $PHP, by default php-config and
dnl php from PATH. Set them only when configure's PHP (--with-php-config) is
dnl another one: ext-php-rs rebuilds when they change, so leaving them unset
dnl lets a build share its cargo target directory with `make php`.
ferrolock_realpath() {
  test -n "$1" && "$PHP_EXECUTABLE" -n -r 'echo realpath($argv@<:@1@:>@);' "$1" 2>/dev/null
}
if test -z "$PHP_EXECUTABLE" || test ! -x "$PHP_EXECUTABLE"; then
  AC_MSG_ERROR([$PHP_CONFIG --php-binary names no runnable PHP ("$PHP_EXECUTABLE"): ext-php-rs needs the PHP binary too.])
fi
ferrolock_php_config=$PHP_CONFIG
case $ferrolock_php_config in
  */*) ;;
  *) ferrolock_php_config=$(command -v "$ferrolock_php_config" 2>/dev/null) ;;
esac
ferrolock_php_config=$(ferrolock_realpath "$ferrolock_php_config")
ferrolock_php=$(ferrolock_realpath "$PHP_EXECUTABLE")
ferrolock_path_php_config=$(ferrolock_realpath "$(command -v php-config 2>/dev/null)")
ferrolock_path_php=$(ferrolock_realpath "$(command -v php 2>/dev/null)")
AC_MSG_CHECKING([for the PHP cargo builds against])
if test "$ferrolock_php_config" = "$ferrolock_path_php_config" && test "$ferrolock_php" = "$ferrolock_path_php"; then
  ferrolock_php_env=
  AC_MSG_RESULT([$ferrolock_php (php and php-config in PATH)])
else
  ferrolock_php_env="PHP='$ferrolock_php' PHP_CONFIG='$ferrolock_php_config'"
  AC_MSG_RESULT([$ferrolock_php, with $ferrolock_php_config])
fi

FERROLOCK_CARGO_ENV="$ferrolock_libclang_env $ferrolock_php_env"
dnl No C sources, hence no object directories: name modules/ (where the
dnl library goes) so that the build-directory step has one to make.
PHP_ADD_BUILD_DIR([modules])
PHP_SUBST([CARGO])
PHP_SUBST([FERROLOCK_CARGO_ENV])
PHP_ADD_MAKEFILE_FRAGMENT([$abs_srcdir/Makefile.frag], [$abs_srcdir], [$abs_builddir])
