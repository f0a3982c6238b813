//! The legacy classes' names: `RedisLock`, `RedisQueue`, `RedisLockException`
//! in the global namespace, or only as `Ferrolock\RedisLock`, … (ini
//! `ferrolock.legacy_classes`, read once at MINIT).
//!
//! On (the default): each class has its legacy name, and its namespaced name
//! is an alias of the same class, so code moved to `\Ferrolock\RedisLock`
//! and code still saying `RedisLock` share objects, type hints and `catch`es.
//! Off: each class exists only under its namespaced name, so the global names
//! stay free for a legacy class file that an app still `require`s.
//!
//! ext-php-rs registers a class under the name its Rust type declares; a
//! name chosen at MINIT is given by renaming the class right after it is
//! registered (see [`register`]).

use std::borrow::Cow;
use std::ffi::{CStr, c_char, c_int};
use std::sync::atomic::{AtomicBool, Ordering};

use ext_php_rs::builders::ClassBuilder;
use ext_php_rs::class::RegisteredClass;
use ext_php_rs::ffi::{HashTable, ext_php_rs_compiler_globals, zval};
use ext_php_rs::types::ZendStr;
use ext_php_rs::zend::ClassEntry;

/// The ini entry switching the global names on or off.
pub const INI_LEGACY_CLASSES: &str = "ferrolock.legacy_classes";

/// The namespace of the modern classes and of the legacy classes' other name.
pub const NAMESPACE: &str = "Ferrolock\\";

/// Whether the legacy classes have their global names (set once, at MINIT).
static GLOBAL: AtomicBool = AtomicBool::new(true);

// Zend API (not in ext-php-rs' bindings), resolved when PHP loads the
// extension. ZEND_FASTCALL: the C convention, `__vectorcall` on Windows.
#[cfg(not(windows))]
unsafe extern "C" {
    fn zend_hash_str_find(ht: *const HashTable, key: *const c_char, len: usize) -> *mut zval;
    fn zend_hash_str_del(ht: *mut HashTable, key: *const c_char, len: usize) -> c_int;
    fn zend_hash_str_add(
        ht: *mut HashTable,
        key: *const c_char,
        len: usize,
        data: *mut zval,
    ) -> *mut zval;
}
#[cfg(windows)]
unsafe extern "vectorcall" {
    fn zend_hash_str_find(ht: *const HashTable, key: *const c_char, len: usize) -> *mut zval;
    fn zend_hash_str_del(ht: *mut HashTable, key: *const c_char, len: usize) -> c_int;
    fn zend_hash_str_add(
        ht: *mut HashTable,
        key: *const c_char,
        len: usize,
        data: *mut zval,
    ) -> *mut zval;
}
unsafe extern "C" {
    fn zend_ini_string_ex(
        name: *const c_char,
        len: usize,
        orig: c_int,
        exists: *mut bool,
    ) -> *mut c_char;
    fn zend_register_class_alias_ex(
        name: *const c_char,
        len: usize,
        ce: *mut ClassEntry,
        persistent: bool,
    ) -> c_int;
}

/// The value of an ini entry (empty when unset).
pub fn ini_string(name: &str) -> String {
    let mut exists = false;
    // SAFETY: the name pointer/length describe a valid string; PHP returns a
    // NUL-terminated string owned by the ini table, or NULL.
    let value = unsafe { zend_ini_string_ex(name.as_ptr().cast(), name.len(), 0, &mut exists) };
    if value.is_null() {
        return String::new();
    }
    // SAFETY: non-null, NUL-terminated, valid for the duration of this call.
    unsafe { CStr::from_ptr(value) }
        .to_string_lossy()
        .into_owned()
}

/// A boolean ini value read as PHP reads one (`zend_ini_parse_bool`):
/// "true", "yes", "on" (any case), else a nonzero leading integer.
pub fn parse_bool(value: &str) -> bool {
    let v = value.trim();
    if ["true", "yes", "on"]
        .iter()
        .any(|w| v.eq_ignore_ascii_case(w))
    {
        return true;
    }
    let digits: String = v
        .char_indices()
        .take_while(|&(i, c)| c.is_ascii_digit() || (i == 0 && (c == '-' || c == '+')))
        .map(|(_, c)| c)
        .collect();
    digits.parse::<i64>().is_ok_and(|n| n != 0)
}

/// Reads `ferrolock.legacy_classes` (at MINIT, after its registration).
pub fn read_ini() {
    GLOBAL.store(
        parse_bool(&ini_string(INI_LEGACY_CLASSES)),
        Ordering::Relaxed,
    );
}

/// True when the legacy classes have their global names.
pub fn global_names() -> bool {
    GLOBAL.load(Ordering::Relaxed)
}

/// The registered name of a legacy class (`RedisLock` →
/// `Ferrolock\RedisLock` when the global names are off).
pub fn class_name(legacy: &'static str) -> Cow<'static, str> {
    if global_names() {
        Cow::Borrowed(legacy)
    } else {
        Cow::Owned(format!("{NAMESPACE}{legacy}"))
    }
}

/// A method's name as PHP shows it (`RedisLock::lock` →
/// `Ferrolock\RedisLock::lock` when the global names are off); other
/// functions' names as they are.
pub fn qualify(function: &'static str) -> Cow<'static, str> {
    match function.split_once("::") {
        Some((class @ ("RedisLock" | "RedisQueue"), method)) if !global_names() => {
            Cow::Owned(format!("{NAMESPACE}{class}::{method}"))
        }
        _ => Cow::Borrowed(function),
    }
}

/// The class table of the compiler globals (where MINIT declares classes;
/// `zend_lookup_class` needs the executor's, which is not set up yet).
fn class_table() -> *mut HashTable {
    // SAFETY: CG() of this thread, valid for the process.
    unsafe {
        ext_php_rs_compiler_globals()
            .as_ref()
            .map_or(std::ptr::null_mut(), |cg| cg.class_table)
    }
}

/// A class declared so far, by name, at MINIT.
pub fn find_class(name: &str) -> Option<&'static ClassEntry> {
    let table = class_table();
    if table.is_null() {
        return None;
    }
    let lower = name.trim_start_matches('\\').to_ascii_lowercase();
    // SAFETY: the class table's entries for classes are IS_PTR or
    // IS_ALIAS_PTR zvals pointing at the class, which lives for the process.
    unsafe {
        let entry = zend_hash_str_find(table, lower.as_ptr().cast(), lower.len());
        entry
            .as_ref()
            .and_then(|z| z.value.ptr.cast::<ClassEntry>().as_ref())
    }
}

/// Registers the legacy class `T` (at MINIT) under its legacy name, plus its
/// namespaced alias, or only under its namespaced name (see the module
/// documentation). The same steps as ext-php-rs' `ModuleBuilder::class`, for
/// a class without properties or constants.
pub fn register<T: RegisteredClass>() -> ext_php_rs::error::Result<()> {
    let mut builder = ClassBuilder::new(T::CLASS_NAME);
    for (method, flags) in T::method_builders() {
        builder = builder.method(method, flags);
    }
    builder
        .flags(T::FLAGS)
        .object_override::<T>()
        .registration(|ce| T::get_metadata().set_ce(ce))
        .docs(T::DOC_COMMENTS)
        .register()?;
    name_declared(T::CLASS_NAME)
}

/// Gives the class just declared under its legacy name (by [`register`], or
/// by a `ClassBuilder`) its namespaced name: as an alias, or, with the global
/// names off, as its only name.
pub fn name_declared(legacy: &'static str) -> ext_php_rs::error::Result<()> {
    let namespaced = format!("{NAMESPACE}{legacy}");
    let table = class_table();
    if table.is_null() {
        return Err(ext_php_rs::error::Error::InvalidPointer);
    }
    let lower = legacy.to_ascii_lowercase();
    // SAFETY: MINIT, single-threaded; `table` is the class table, whose
    // entries for internal classes are IS_PTR zvals pointing at the class.
    unsafe {
        let entry = zend_hash_str_find(table, lower.as_ptr().cast(), lower.len());
        if entry.is_null() {
            return Err(ext_php_rs::error::Error::InvalidPointer);
        }
        let ce = (*entry).value.ptr.cast::<ClassEntry>();
        if global_names() {
            let ok = zend_register_class_alias_ex(
                namespaced.as_ptr().cast(),
                namespaced.len(),
                ce,
                true,
            );
            return if ok == 0 {
                Ok(())
            } else {
                Err(ext_php_rs::error::Error::InvalidPointer)
            };
        }
        // Rename: move the entry to the namespaced key without running the
        // table's destructor (which would destroy the class), then give the
        // class its new name.
        let mut moved: zval = std::ptr::read(entry);
        let destructor = (*table).pDestructor.take();
        zend_hash_str_del(table, lower.as_ptr().cast(), lower.len());
        (*table).pDestructor = destructor;
        (*ce).name = ZendStr::new_interned(&namespaced, true).into_raw();
        let key = namespaced.to_ascii_lowercase();
        let added = zend_hash_str_add(table, key.as_ptr().cast(), key.len(), &mut moved);
        if added.is_null() {
            return Err(ext_php_rs::error::Error::InvalidPointer);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_bool;

    #[test]
    fn ini_booleans_read_as_php_reads_them() {
        for on in ["1", "On", "yes", "TRUE", " 2 ", "-1"] {
            assert!(parse_bool(on), "{on}");
        }
        for off in ["", "0", "Off", "no", "false", "none", "00"] {
            assert!(!parse_bool(off), "{off}");
        }
    }
}
