//! multus-rs's meta-plugin side: the node installer (`multus install`).

pub mod install;
