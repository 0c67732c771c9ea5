//! `validate()`: every structural invariant, checked the slow way (the maple
//! tree's `mt_validate`).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::node::{INNER_MIN, INNER_SLOTS, LEAF_MIN, LEAF_SLOTS, NIL};
use super::ops::Node;
use super::tree::RangeTree;

impl<V> RangeTree<V> {
    pub(super) fn check(&self) -> Result<(), String> {
        let mut leaves = Vec::new();
        let mut inners = 0usize;
        if self.root == NIL {
            if self.len != 0 || self.height != 0 {
                return Err(format!(
                    "no root but len {} height {}",
                    self.len, self.height
                ));
            }
        } else {
            if self.height == 0 {
                return Err("a root but height 0".into());
            }
            let root = self.root_node();
            if self.parent(root) != NIL {
                return Err("root has a parent".into());
            }
            self.check_node(root, 1, &mut leaves, &mut inners)?;
        }
        // The leaf chain runs through the leaves in key order.
        let mut count = 0usize;
        let mut prev_last: Option<u64> = None;
        for (k, &leaf) in leaves.iter().enumerate() {
            let l = &self.leaves[leaf as usize];
            let want_prev = if k == 0 { NIL } else { leaves[k - 1] };
            let want_next = leaves.get(k + 1).copied().unwrap_or(NIL);
            if l.prev != want_prev || l.next != want_next {
                return Err(format!(
                    "leaf {leaf}: links prev {} next {}, want {want_prev} {want_next}",
                    l.prev, l.next
                ));
            }
            for j in 0..l.len() {
                if let Some(p) = prev_last {
                    if l.first[j] <= p {
                        return Err(format!(
                            "leaf {leaf} slot {j}: entry at {:#x} overlaps or precedes one ending at {p:#x}",
                            l.first[j]
                        ));
                    }
                }
                prev_last = Some(l.last[j]);
            }
            count += l.len();
        }
        if count != self.len {
            return Err(format!(
                "{count} entries in the leaves, len says {}",
                self.len
            ));
        }
        // Every node is either reachable or on a free list, never both.
        let live_leaves = leaves.len() + self.free_leaves.len();
        let live_inners = inners + self.free_inners.len();
        if live_leaves != self.leaves.len() || live_inners != self.inners.len() {
            return Err(format!(
                "arena: {} leaves reachable + {} free of {}, {inners} internal reachable + {} free of {}",
                leaves.len(),
                self.free_leaves.len(),
                self.leaves.len(),
                self.free_inners.len(),
                self.inners.len()
            ));
        }
        // Every value is named by exactly one entry, whose leaf owns it.
        if self.vals.len() != self.len || self.owner.len() != self.len {
            return Err(format!(
                "{} values and {} owners for {} entries",
                self.vals.len(),
                self.owner.len(),
                self.len
            ));
        }
        let mut used = alloc::vec![false; self.vals.len()];
        for &leaf in &leaves {
            let l = &self.leaves[leaf as usize];
            for &v in &l.val[..l.len()] {
                match used.get_mut(v as usize) {
                    Some(u) if !*u => *u = true,
                    _ => {
                        return Err(format!(
                            "leaf {leaf}: value index {v} out of range or used twice"
                        ))
                    }
                }
                if self.owner[v as usize] != leaf {
                    return Err(format!(
                        "value {v} is in leaf {leaf}, owner says {}",
                        self.owner[v as usize]
                    ));
                }
            }
        }
        for &f in &self.free_leaves {
            if leaves.contains(&f) || self.leaves[f as usize].len != 0 {
                return Err(format!("freed leaf {f} is in use"));
            }
        }
        Ok(())
    }

    fn check_node(
        &self,
        n: Node,
        depth: u32,
        leaves: &mut Vec<u32>,
        inners: &mut usize,
    ) -> Result<(), String> {
        let is_root = self.parent(n) == NIL;
        match n {
            Node::Leaf(i) => {
                if depth != self.height {
                    return Err(format!("leaf {i} at depth {depth}, height {}", self.height));
                }
                let l = &self.leaves[i as usize];
                let len = l.len();
                if len > LEAF_SLOTS || (!is_root && len < LEAF_MIN) {
                    return Err(format!(
                        "leaf {i}: {len} entries (min {LEAF_MIN}, max {LEAF_SLOTS})"
                    ));
                }
                for j in 0..LEAF_SLOTS {
                    if j < len {
                        if l.first[j] > l.last[j] {
                            return Err(format!(
                                "leaf {i} slot {j}: first {:#x} > last {:#x}",
                                l.first[j], l.last[j]
                            ));
                        }
                        // Gaps are implicit between entries, so the maple rule
                        // "no two consecutive NULL slots" becomes: no slot in
                        // use is empty.
                        if l.val[j] == NIL {
                            return Err(format!("leaf {i} slot {j}: no value"));
                        }
                        if j > 0 && l.first[j] <= l.last[j - 1] {
                            return Err(format!("leaf {i} slot {j}: pivots not increasing"));
                        }
                    } else if l.first[j] != u64::MAX || l.val[j] != NIL {
                        return Err(format!("leaf {i} slot {j}: unused slot not cleared"));
                    }
                }
                leaves.push(i);
                Ok(())
            }
            Node::Inner(i) => {
                *inners += 1;
                if depth >= self.height {
                    return Err(format!(
                        "internal node {i} at depth {depth}, height {}",
                        self.height
                    ));
                }
                let node = &self.inners[i as usize];
                let len = node.len();
                let min = if is_root { 2 } else { INNER_MIN };
                if len > INNER_SLOTS || len < min {
                    return Err(format!(
                        "internal node {i}: {len} children (min {min}, max {INNER_SLOTS})"
                    ));
                }
                if node.leaf_kids != (depth + 1 == self.height) {
                    return Err(format!(
                        "internal node {i}: leaf_kids flag wrong at depth {depth}"
                    ));
                }
                for c in len..INNER_SLOTS {
                    if node.lo[c] != u64::MAX || node.child[c] != NIL {
                        return Err(format!(
                            "internal node {i} slot {c}: unused slot not cleared"
                        ));
                    }
                }
                for c in 0..len {
                    let kid = self.kid(i, c);
                    if self.parent(kid) != i {
                        return Err(format!(
                            "internal node {i} slot {c}: child {kid:?} names parent {}",
                            self.parent(kid)
                        ));
                    }
                    let actual = self.summary(kid);
                    if node.get(c) != actual {
                        return Err(format!(
                            "internal node {i} slot {c}: records {:?}, child has {actual:?}",
                            node.get(c)
                        ));
                    }
                    if c > 0 && node.lo[c] <= node.hi[c - 1] {
                        return Err(format!("internal node {i} slot {c}: children out of order"));
                    }
                    self.check_node(kid, depth + 1, leaves, inners)?;
                }
                Ok(())
            }
        }
    }
}
