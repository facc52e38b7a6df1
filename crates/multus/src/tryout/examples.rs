//! The bundled examples (examples/ in the source tree), built into the binary so that
//! `multus try` works wherever the binary is.

pub struct Example {
    pub name: &'static str,
    pub files: &'static [(&'static str, &'static str)],
    /// Skipped, and said so, on a kernel without ipvlan.
    pub needs_ipvlan: bool,
}

macro_rules! example {
    ($name:literal, $needs_ipvlan:expr) => {
        Example {
            name: $name,
            files: &[
                (
                    "nad.yaml",
                    include_str!(concat!("../../../../examples/", $name, "/nad.yaml")),
                ),
                (
                    "pod.yaml",
                    include_str!(concat!("../../../../examples/", $name, "/pod.yaml")),
                ),
            ],
            needs_ipvlan: $needs_ipvlan,
        }
    };
}

pub const ALL: &[Example] = &[
    example!("bridge", false),
    example!("macvlan", false),
    example!("ipvlan", true),
    example!("static", false),
];
