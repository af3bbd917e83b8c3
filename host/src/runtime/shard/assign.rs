//! Which replica runs which guest: rendezvous hashing over the guests and the members' names,
//! every guest to exactly one member, counts differing by at most one.

use std::collections::{BTreeMap, BTreeSet};

/// Rendezvous score of `member` for `guest`: FNV-1a over both names, then a 64-bit finaliser
/// (stable across builds and platforms, unlike `std`'s hasher).
fn score(guest: &str, member: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in guest.bytes().chain([0]).chain(member.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^ (hash >> 33)
}

/// Which member runs which guest: every guest to exactly one member, counts differing by at
/// most one. See the [module docs](super). Empty when there are no members.
pub fn assign<'a>(guests: &[&'a str], members: &[&'a str]) -> BTreeMap<&'a str, Vec<&'a str>> {
    let mut members: Vec<&str> = members.to_vec();
    members.sort_unstable();
    members.dedup();
    let mut guests: Vec<&str> = guests.to_vec();
    guests.sort_unstable();
    guests.dedup();
    let mut out: BTreeMap<&str, Vec<&str>> = members.iter().map(|m| (*m, Vec::new())).collect();
    if members.is_empty() {
        return out;
    }
    let share = guests.len() / members.len();
    let mut one_more = guests.len() % members.len();
    for guest in guests {
        let mut ranked = members.clone();
        ranked.sort_by_key(|m| std::cmp::Reverse((score(guest, m), *m)));
        let chosen = ranked.into_iter().find(|m| {
            let held = out.get(m).map_or(0, Vec::len);
            held < share || (held == share && one_more > 0)
        });
        // Capacity is exactly the number of guests, so a member is always found.
        if let Some(member) = chosen {
            let held = out.entry(member).or_default();
            if held.len() == share {
                one_more -= 1;
            }
            held.push(guest);
        }
    }
    out
}

/// A member of the group and the guests it runs (`None`: every guest, e.g. an older replica
/// that does not say).
pub type Member<'a> = (&'a str, Option<&'a BTreeSet<String>>);

/// [`assign`] for members that may not all run the same guests: the guests every member runs
/// are balanced as by [`assign`]; each other guest goes to the least loaded member that runs it
/// (ties broken by rendezvous rank). Guests no member runs are left out.
pub fn assign_runnable<'a>(
    guests: &[&'a str],
    members: &[Member<'a>],
) -> BTreeMap<&'a str, Vec<&'a str>> {
    let runs = |member: &Member<'_>, guest: &str| member.1.is_none_or(|set| set.contains(guest));
    let mut guests: Vec<&str> = guests.to_vec();
    guests.sort_unstable();
    guests.dedup();
    let (everywhere, partial): (Vec<&str>, Vec<&str>) = guests
        .iter()
        .partition(|g| members.iter().all(|m| runs(m, g)));
    let names: Vec<&str> = members.iter().map(|m| m.0).collect();
    let mut out = assign(&everywhere, &names);
    for guest in partial {
        let chosen = members.iter().filter(|m| runs(m, guest)).min_by_key(|m| {
            let load = out.get(m.0).map_or(0, Vec::len);
            (load, std::cmp::Reverse(score(guest, m.0)), m.0)
        });
        if let Some(member) = chosen {
            out.entry(member.0).or_default().push(guest);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(assignment: &BTreeMap<&str, Vec<&str>>) -> Vec<usize> {
        assignment.values().map(Vec::len).collect()
    }

    #[test]
    fn every_guest_should_go_to_exactly_one_member_evenly() {
        let guests: Vec<String> = (0..6).map(|i| format!("guest-{i}")).collect();
        let guests: Vec<&str> = guests.iter().map(String::as_str).collect();
        let three = assign(&guests, &["a", "b", "c"]);
        assert_eq!(counts(&three), [2, 2, 2]);
        let two = assign(&guests, &["a", "c"]);
        assert_eq!(counts(&two), [3, 3]);
        let seven: Vec<&str> = guests.iter().copied().chain(["guest-6"]).collect();
        let mut uneven = counts(&assign(&seven, &["a", "b", "c"]));
        uneven.sort_unstable();
        assert_eq!(uneven, [2, 2, 3]);
        for assignment in [&three, &two] {
            let mut all: Vec<&str> = assignment.values().flatten().copied().collect();
            all.sort_unstable();
            assert_eq!(all, guests, "each guest once");
        }
        assert!(assign(&guests, &[]).is_empty());
    }

    #[test]
    fn a_guest_only_some_members_run_should_go_to_one_of_them() {
        let old: BTreeSet<String> = ["g0", "g1", "g2", "g3"].map(str::to_owned).into();
        let new: BTreeSet<String> = ["g0", "g1", "g2", "g3", "g4"].map(str::to_owned).into();
        let guests = ["g0", "g1", "g2", "g3", "g4"];
        let assignment = assign_runnable(
            &guests,
            &[("a", Some(&old)), ("b", Some(&new)), ("c", Some(&old))],
        );
        assert_eq!(assignment["b"].iter().filter(|g| **g == "g4").count(), 1);
        let mut all: Vec<&str> = assignment.values().flatten().copied().collect();
        all.sort_unstable();
        assert_eq!(all, guests, "each guest once");
        let mut loads = counts(&assignment);
        loads.sort_unstable();
        assert_eq!(loads, [1, 2, 2], "still balanced");
        let unknown = assign_runnable(&guests, &[("a", None), ("b", Some(&old))]);
        assert!(
            unknown["a"].contains(&"g4"),
            "a member that does not say runs all"
        );
        assert_eq!(
            assign_runnable(&guests, &[("a", None), ("b", None)]),
            assign(&guests, &["a", "b"]),
            "the same as assign when every member runs every guest"
        );
    }

    #[test]
    fn the_assignment_should_not_depend_on_the_order_of_the_view() {
        let guests = ["x", "y", "z", "w", "v"];
        let forward = assign(&guests, &["m1", "m2", "m3"]);
        let backward = assign(&["v", "w", "z", "y", "x"], &["m3", "m1", "m2", "m1"]);
        assert_eq!(forward, backward);
    }
}
