//! The bundled examples (examples/ in the source tree), built into the binary so that
//! `multus try` works wherever the binary is.

pub struct Example {
    pub name: &'static str,
    pub files: &'static [(&'static str, &'static str)],
    /// Skipped, and said so, on a kernel without ipvlan.
    pub needs_ipvlan: bool,
    /// Skipped, and said so, when the cni-plugins binary has no dhcp.
    pub needs_dhcp: bool,
}

macro_rules! example {
    ($name:literal, $needs_ipvlan:expr, $needs_dhcp:expr) => {
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
            needs_dhcp: $needs_dhcp,
        }
    };
}

pub const ALL: &[Example] = &[
    example!("bridge", false, false),
    example!("macvlan", false, false),
    example!("ipvlan", true, false),
    example!("static", false, false),
    example!("dhcp", false, true),
    example!("whereabouts", false, false),
];
