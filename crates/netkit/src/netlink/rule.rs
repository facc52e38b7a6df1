//! Policy routing rules (`ip rule`): which table a packet is looked up in.

use ipnet::IpNet;
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};
use netlink_packet_route::RouteNetlinkMessage;

use super::{Family, Netlink};
use crate::error::Result;

/// A rule sending packets that match to a table. Build one with [`Rule::to_table`]; read them
/// with [`Netlink::rules`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub family: Family,
    /// Matches packets from this source (a host or a prefix); `None`: any source.
    pub src: Option<IpNet>,
    /// The table looked up; 0 for rules of another action.
    pub table: u32,
    /// `None`: the kernel picks one below the last rule's.
    pub priority: Option<u32>,
    /// Whether the action is a table lookup.
    pub to_table: bool,
}

impl Rule {
    /// `from <src> lookup <table>`, in the family of `src`.
    pub fn to_table(src: IpNet, table: u32) -> Rule {
        Rule {
            family: Family::of_net(&src),
            src: Some(src),
            table,
            priority: None,
            to_table: true,
        }
    }

    fn to_message(&self) -> RuleMessage {
        let mut msg = RuleMessage::default();
        let h = &mut msg.header;
        h.family = self.family.address_family();
        h.action = RuleAction::ToTable;
        // Tables above 255 only fit in FRA_TABLE, which is always sent.
        h.table = u8::try_from(self.table).unwrap_or(0);
        if let Some(src) = self.src {
            h.src_len = src.prefix_len();
            msg.attributes.push(RuleAttribute::Source(src.addr()));
        }
        msg.attributes.push(RuleAttribute::Table(self.table));
        msg.attributes
            .extend(self.priority.map(RuleAttribute::Priority));
        msg
    }

    fn from_message(msg: RuleMessage) -> Option<Rule> {
        let h = &msg.header;
        let family = Family::from_address_family(h.family)?;
        let mut rule = Rule {
            family,
            src: None,
            table: h.table.into(),
            priority: None,
            to_table: h.action == RuleAction::ToTable,
        };
        let src_len = h.src_len;
        for attr in msg.attributes {
            match attr {
                RuleAttribute::Source(ip) => rule.src = IpNet::new(ip, src_len).ok(),
                RuleAttribute::Table(t) => rule.table = t,
                RuleAttribute::Priority(p) => rule.priority = Some(p),
                _ => {}
            }
        }
        Some(rule)
    }

    fn describe(&self) -> String {
        let from = self.src.map_or_else(|| "all".to_owned(), |s| s.to_string());
        format!("rule from {from} lookup {}", self.table)
    }
}

impl Netlink {
    /// Adds a rule; EEXIST when the same rule (with the same priority) exists.
    pub fn add_rule(&self, rule: &Rule) -> Result<()> {
        self.ack(
            RouteNetlinkMessage::NewRule(rule.to_message()),
            NLM_F_CREATE | NLM_F_EXCL,
            || format!("adding {}", rule.describe()),
        )
    }

    /// Deletes the rule matching `rule` (source, table, and priority when set). ENOENT when
    /// there is none.
    pub fn del_rule(&self, rule: &Rule) -> Result<()> {
        self.ack(RouteNetlinkMessage::DelRule(rule.to_message()), 0, || {
            format!("deleting {}", rule.describe())
        })
    }

    /// The rules of one family, in the kernel's order.
    pub fn rules(&self, family: Family) -> Result<Vec<Rule>> {
        let mut msg = RuleMessage::default();
        msg.header.family = family.address_family();
        let replies = self.dump(RouteNetlinkMessage::GetRule(msg), || {
            format!("listing {family:?} rules")
        })?;
        Ok(replies
            .into_iter()
            .filter_map(|r| match r {
                RouteNetlinkMessage::NewRule(m) => Rule::from_message(m),
                _ => None,
            })
            .collect())
    }
}
