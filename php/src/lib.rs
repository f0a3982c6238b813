//! The ferrolock PHP extension: `RedisLock`, `RedisQueue` and
//! `RedisLockException`, drop-in replacements for the legacy classes.
//!
//! Thin by design: arguments are converted with PHP's rules (`args.rs`), the
//! connection is resolved from `$param` (`connect.rs`), errors follow one
//! policy (`errors.rs`), and every semantic is the `ferrolock` crate's. No
//! Rust panic may cross into PHP: every method body runs inside
//! `errors::guard`.
// PHP parameter names are camelCase ($waitIntervalUs): ext-php-rs uses the
// Rust identifiers as they are.
#![allow(non_snake_case)]
#![cfg_attr(windows, feature(abi_vectorcall))]

mod args;
mod connect;
mod errors;
mod lock;
mod queue;

use std::ffi::c_int;

use ext_php_rs::flags::IniEntryPermission;
use ext_php_rs::prelude::*;
use ext_php_rs::zend::IniEntryDef;

unsafe extern "C" {
    fn zend_unregister_ini_entries_ex(module_number: c_int, module_type: c_int);
}

/// MINIT: the exception class and the `ferrolock.url` ini entry (ext-php-rs
/// registers `RedisLock` and `RedisQueue` right after).
pub fn startup(_ty: i32, module_number: i32) -> i32 {
    if errors::RedisLockException::declare().is_err() {
        return -1; // FAILURE: PHP reports the extension as not loadable
    }
    IniEntryDef::register(
        vec![IniEntryDef::new(
            connect::INI_URL.into(),
            String::new(),
            &IniEntryPermission::All,
        )],
        module_number,
    );
    0
}

extern "C" fn module_shutdown(ty: i32, module_number: i32) -> i32 {
    // SAFETY: unregisters the entries registered in `startup`.
    unsafe { zend_unregister_ini_entries_ex(module_number, ty) };
    0
}

extern "C" fn request_shutdown(_ty: i32, _module_number: i32) -> i32 {
    lock::release_instance();
    0
}

#[php_module]
#[php(startup = startup)]
pub fn get_module(module: ModuleBuilder<'_>) -> ModuleBuilder<'_> {
    module
        .name("ferrolock")
        .version(env!("CARGO_PKG_VERSION"))
        .class::<lock::RedisLock>()
        .class::<queue::RedisQueue>()
        .shutdown_function(module_shutdown)
        .request_shutdown_function(request_shutdown)
}
