//! The ferrolock PHP extension.
//!
//! - The legacy classes `RedisLock`, `RedisQueue` and `RedisLockException`,
//!   drop-in replacements for the hand-written ones (`lock.rs`, `queue.rs`),
//!   also named `Ferrolock\RedisLock`, … and, with ini
//!   `ferrolock.legacy_classes` off, only so (`legacy.rs`).
//! - The modern classes `Ferrolock\Lock`, `Ferrolock\Queue`, `Ferrolock\Task`
//!   and their exceptions, with the Python package's semantics (`modern/`).
//! - `Ferrolock\Metrics` and `Ferrolock\Events`: this process's lock figures
//!   and the lost-lock hook (`ops.rs`).
//!
//! Thin by design: arguments are converted with PHP's rules (`args.rs`), the
//! connection is resolved from `$param` (`connect.rs`), errors follow one
//! policy per family (`errors.rs`), and every semantic is the `ferrolock`
//! crate's. No Rust panic may cross into PHP: every method body runs inside
//! `errors::guard`.
// PHP parameter names are camelCase ($waitIntervalUs): ext-php-rs uses the
// Rust identifiers as they are.
#![allow(non_snake_case)]
#![cfg_attr(windows, feature(abi_vectorcall))]

mod args;
mod connect;
mod errors;
mod jobs;
mod legacy;
mod lock;
mod modern;
mod ops;
mod queue;

use std::ffi::c_int;

use ext_php_rs::flags::IniEntryPermission;
use ext_php_rs::prelude::*;
use ext_php_rs::zend::IniEntryDef;

unsafe extern "C" {
    fn zend_unregister_ini_entries_ex(module_number: c_int, module_type: c_int);
}

/// MINIT: the ini entries (`ferrolock.url`, `ferrolock.legacy_classes`),
/// the exception classes and the legacy classes under the names the ini
/// chooses (ext-php-rs registers the modern classes right after).
pub fn startup(_ty: i32, module_number: i32) -> i32 {
    IniEntryDef::register(
        vec![
            IniEntryDef::new(
                connect::INI_URL.into(),
                String::new(),
                &IniEntryPermission::All,
            ),
            // Classes are declared once per process: php.ini or -d only.
            IniEntryDef::new(
                legacy::INI_LEGACY_CLASSES.into(),
                "1".into(),
                &IniEntryPermission::System,
            ),
        ],
        module_number,
    );
    legacy::read_ini();
    let declared = errors::RedisLockException::declare()
        .and_then(|()| errors::Exc::declare_all())
        .and_then(|()| legacy::register::<lock::RedisLock>())
        .and_then(|()| legacy::register::<queue::RedisQueue>());
    if declared.is_err() {
        return -1; // FAILURE: PHP reports the extension as not loadable
    }
    0
}

extern "C" fn module_shutdown(ty: i32, module_number: i32) -> i32 {
    // SAFETY: unregisters the entries registered in `startup`.
    unsafe { zend_unregister_ini_entries_ex(module_number, ty) };
    0
}

extern "C" fn request_shutdown(_ty: i32, _module_number: i32) -> i32 {
    lock::release_instance();
    ops::release_hook();
    0
}

#[php_module]
#[php(startup = startup)]
pub fn get_module(module: ModuleBuilder<'_>) -> ModuleBuilder<'_> {
    module
        .name("ferrolock")
        .version(env!("CARGO_PKG_VERSION"))
        .class::<modern::lock::Lock>()
        .class::<modern::queue::Queue>()
        .class::<modern::task::Task>()
        .class::<ops::Metrics>()
        .class::<ops::Events>()
        .shutdown_function(module_shutdown)
        .request_shutdown_function(request_shutdown)
}
