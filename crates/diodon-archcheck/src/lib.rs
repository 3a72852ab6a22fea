//! Architecture checks over the workspace's own sources, run as tests under
//! `cargo test --workspace` (`tests/import_loops.rs`). This crate owns the
//! module graph of a crate and the search for import loops in it; it is not
//! linked by any product crate.
//!
//! ```text
//!  crates/*/src/{lib,main,bin/*}.rs          one crate root each
//!     │ mod x;  → x.rs | x/mod.rs (inline `mod x { … }` too;
//!     │           items under #[cfg(test)] and doc comments are skipped)
//!     ▼
//!  module tree ─► each module's `use` trees, paths and macro tokens that
//!     │           start with crate:: / super:: / self:: / a child module
//!     │           (re-exports followed to the module that defines the item)
//!     ▼
//!  edges module → module ─► strongly connected components (Tarjan)
//!     ▼
//!  every component of more than one module is a loop, printed as
//!  a → b (a.rs:12 `crate::b::X`) → a (b.rs:40 `super::a::Y`)
//! ```
//!
//! A `mod` declaration is not an edge (the parent owns the child, it does
//! not depend on it); a `use`, a path in code or in a macro's tokens is.
//! The crate root's `pub use` re-exports are not edges either: they are the
//! crate's facade, and a path through them (`crate::Endpoint`) is resolved
//! to the module that defines the item. Code in the root that calls into a
//! module is an edge like any other.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// Why a crate's module graph could not be built.
#[derive(Debug)]
pub enum Error {
    /// A source file could not be read.
    Read(PathBuf, std::io::Error),
    /// A source file is not valid Rust.
    Parse(PathBuf, syn::Error),
    /// `mod x;` with no `x.rs` or `x/mod.rs`.
    MissingModule(PathBuf, String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Read(p, e) => write!(f, "{}: {e}", p.display()),
            Error::Parse(p, e) => write!(f, "{}: {e}", p.display()),
            Error::MissingModule(p, m) => write!(f, "{}: no file for `mod {m};`", p.display()),
        }
    }
}

impl std::error::Error for Error {}

/// Where one module refers to another: file, line and the path as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    /// Source file of the referring module.
    pub file: PathBuf,
    /// Line of the reference.
    pub line: usize,
    /// The path, `a::b::C`.
    pub path: String,
}

#[derive(Debug)]
struct Module {
    /// Path from the crate root (`[]` for the root).
    path: Vec<String>,
    file: PathBuf,
    parent: Option<usize>,
    children: BTreeMap<String, usize>,
    /// Names brought in by `use` (any visibility): name → path as written.
    imports: BTreeMap<String, Vec<String>>,
    /// Every path that may name a module of this crate, with where.
    refs: Vec<(Vec<String>, Evidence)>,
}

/// The modules of one crate and which refers to which.
#[derive(Debug)]
pub struct ModuleGraph {
    /// The crate's label (package name, plus the binary for `src/bin/*`).
    pub name: String,
    modules: Vec<Module>,
    /// `edges[a][b]`: the first reference from module `a` to module `b`.
    edges: Vec<BTreeMap<usize, Evidence>>,
}

/// One import loop: each module with the reference that leads to the next
/// (the last one leads back to the first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    /// Module paths (`crate::a::b`) and the reference to the next module.
    pub steps: Vec<(String, Evidence)>,
    /// Every module of the strongly connected component (a loop may pass
    /// through more modules than `steps` shows).
    pub component: Vec<String>,
}

impl Cycle {
    /// The module names only: `a -> b -> a`.
    pub fn names(&self) -> String {
        let mut names: Vec<&str> = self.steps.iter().map(|(m, _)| m.as_str()).collect();
        if let Some(first) = names.first().copied() {
            names.push(first);
        }
        names.join(" -> ")
    }
}

impl fmt::Display for Cycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.names())?;
        if self.component.len() > self.steps.len() {
            write!(f, " (the loop joins: {})", self.component.join(", "))?;
        }
        for (m, e) in &self.steps {
            write!(
                f,
                "\n    {m} refers to the next at {}:{} `{}`",
                e.file.display(),
                e.line,
                e.path
            )?;
        }
        Ok(())
    }
}

impl ModuleGraph {
    /// Builds the graph of the crate whose root file is `root`, reading
    /// files from disk.
    pub fn from_root(name: &str, root: &Path) -> Result<Self, Error> {
        Self::build(name, root, &mut |p| {
            if p.exists() {
                std::fs::read_to_string(p)
                    .map(Some)
                    .map_err(|e| Error::Read(p.to_path_buf(), e))
            } else {
                Ok(None)
            }
        })
    }

    /// Builds the graph with `read` as the file system (`Ok(None)`: no such
    /// file).
    pub fn build(
        name: &str,
        root: &Path,
        read: &mut dyn FnMut(&Path) -> Result<Option<String>, Error>,
    ) -> Result<Self, Error> {
        let mut g = ModuleGraph {
            name: name.to_string(),
            modules: Vec::new(),
            edges: Vec::new(),
        };
        let source =
            read(root)?.ok_or_else(|| Error::MissingModule(root.into(), "<root>".into()))?;
        let file = syn::parse_file(&source).map_err(|e| Error::Parse(root.into(), e))?;
        let dir = root.parent().unwrap_or(Path::new("")).to_path_buf();
        g.modules.push(Module {
            path: Vec::new(),
            file: root.to_path_buf(),
            parent: None,
            children: BTreeMap::new(),
            imports: BTreeMap::new(),
            refs: Vec::new(),
        });
        g.load_items(0, &file.items, &dir, read)?;
        g.link();
        Ok(g)
    }

    /// Module paths, `crate` for the root.
    pub fn modules(&self) -> Vec<String> {
        (0..self.modules.len()).map(|i| self.label(i)).collect()
    }

    /// The module paths `from` refers to.
    pub fn dependencies(&self, from: &str) -> Vec<String> {
        let Some(i) = (0..self.modules.len()).find(|&i| self.label(i) == from) else {
            return Vec::new();
        };
        self.edges[i].keys().map(|&j| self.label(j)).collect()
    }

    fn label(&self, i: usize) -> String {
        std::iter::once("crate")
            .chain(self.modules[i].path.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join("::")
    }

    /// Adds the modules and references of `items`, which belong to module
    /// `m`; `dir` is where `mod x;` inside `m` finds `x.rs`.
    fn load_items(
        &mut self,
        m: usize,
        items: &[syn::Item],
        dir: &Path,
        read: &mut dyn FnMut(&Path) -> Result<Option<String>, Error>,
    ) -> Result<(), Error> {
        for item in items {
            if is_cfg_test(item_attrs(item)) {
                continue;
            }
            if let syn::Item::Mod(item_mod) = item {
                let name = item_mod.ident.to_string();
                let mut path = self.modules[m].path.clone();
                path.push(name.clone());
                let child = self.modules.len();
                let parsed;
                let (file, items) = if let Some((_, items)) = &item_mod.content {
                    (self.modules[m].file.clone(), items)
                } else {
                    let flat = dir.join(format!("{name}.rs"));
                    let nested = dir.join(&name).join("mod.rs");
                    let (file, source) = match read(&flat)? {
                        Some(s) => (flat, s),
                        None => match read(&nested)? {
                            Some(s) => (nested, s),
                            None => {
                                return Err(Error::MissingModule(
                                    self.modules[m].file.clone(),
                                    name,
                                ))
                            }
                        },
                    };
                    parsed = syn::parse_file(&source).map_err(|e| Error::Parse(file.clone(), e))?;
                    (file, &parsed.items)
                };
                self.modules.push(Module {
                    path,
                    file,
                    parent: Some(m),
                    children: BTreeMap::new(),
                    imports: BTreeMap::new(),
                    refs: Vec::new(),
                });
                self.modules[m].children.insert(name.clone(), child);
                self.load_items(child, items, &dir.join(&name), read)?;
            } else {
                let mut c = Collector {
                    facade: m == 0,
                    reexporting: false,
                    file: self.modules[m].file.clone(),
                    imports: BTreeMap::new(),
                    refs: Vec::new(),
                };
                c.visit_item(item);
                self.modules[m].imports.extend(c.imports);
                self.modules[m].refs.extend(c.refs);
            }
        }
        Ok(())
    }

    /// Resolves every reference to the module that defines what it names.
    fn link(&mut self) {
        self.edges = vec![BTreeMap::new(); self.modules.len()];
        for m in 0..self.modules.len() {
            for (path, evidence) in &self.modules[m].refs {
                if let Some(target) = self.resolve(m, path, 0) {
                    if target != m {
                        self.edges[m]
                            .entry(target)
                            .or_insert_with(|| evidence.clone());
                    }
                }
            }
        }
    }

    /// The module a path written in module `m` leads to, `None` if it
    /// leaves the crate (another crate, `std`, a local item).
    fn resolve(&self, m: usize, path: &[String], depth: usize) -> Option<usize> {
        if depth > 16 {
            return None;
        }
        let first = path.first()?;
        let (mut cur, rest) = match first.as_str() {
            "crate" => (0, &path[1..]),
            "self" => (m, &path[1..]),
            "super" => {
                let mut cur = m;
                let mut i = 0;
                while path.get(i).is_some_and(|s| s == "super") {
                    cur = self.modules[cur].parent?;
                    i += 1;
                }
                (cur, &path[i..])
            }
            name if self.modules[m].children.contains_key(name) => (m, path),
            name => {
                // A name imported into `m` (`use crate::wire; wire::X`).
                let imported = self.modules[m].imports.get(name)?;
                if path.len() < 2 {
                    return None;
                }
                let mut full = imported.clone();
                full.extend_from_slice(&path[1..]);
                return self.resolve(m, &full, depth + 1);
            }
        };
        for seg in rest {
            if let Some(&child) = self.modules[cur].children.get(seg) {
                cur = child;
            } else if let Some(source) = self.modules[cur].imports.get(seg) {
                // A re-export (or a private import seen from a child): follow
                // it to the module that defines the item.
                if let Some(target) = self.resolve(cur, source, depth + 1) {
                    cur = target;
                }
                break;
            } else {
                break;
            }
        }
        Some(cur)
    }

    /// Every import loop: one cycle per strongly connected component of
    /// more than one module.
    pub fn cycles(&self) -> Vec<Cycle> {
        let mut out = Vec::new();
        for component in self.components() {
            if component.len() < 2 {
                continue;
            }
            let set: BTreeSet<usize> = component.iter().copied().collect();
            let start = *set.iter().next().unwrap_or(&0);
            if let Some(path) = self.path_back(start, &set) {
                let steps = path
                    .windows(2)
                    .map(|w| (self.label(w[0]), self.edges[w[0]][&w[1]].clone()))
                    .collect();
                let component = set.iter().map(|&i| self.label(i)).collect();
                out.push(Cycle { steps, component });
            }
        }
        out
    }

    /// Shortest path `start → … → start` inside `set` (breadth first).
    fn path_back(&self, start: usize, set: &BTreeSet<usize>) -> Option<Vec<usize>> {
        let mut prev: BTreeMap<usize, usize> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        while let Some(a) = queue.pop_front() {
            for &b in self.edges[a].keys() {
                if !set.contains(&b) {
                    continue;
                }
                if b == start {
                    let mut path = vec![start, a];
                    let mut x = a;
                    while x != start {
                        x = prev[&x];
                        path.push(x);
                    }
                    path.reverse();
                    return Some(path);
                }
                if let std::collections::btree_map::Entry::Vacant(e) = prev.entry(b) {
                    e.insert(a);
                    queue.push_back(b);
                }
            }
        }
        None
    }

    /// Strongly connected components (Tarjan, iterative).
    fn components(&self) -> Vec<Vec<usize>> {
        let n = self.modules.len();
        let mut index = vec![usize::MAX; n];
        let mut low = vec![0; n];
        let mut on_stack = vec![false; n];
        let mut stack = Vec::new();
        let mut next = 0;
        let mut out = Vec::new();
        for root in 0..n {
            if index[root] != usize::MAX {
                continue;
            }
            // (node, its successors, position in them)
            let mut work: Vec<(usize, Vec<usize>, usize)> = Vec::new();
            index[root] = next;
            low[root] = next;
            next += 1;
            stack.push(root);
            on_stack[root] = true;
            work.push((root, self.edges[root].keys().copied().collect(), 0));
            while let Some((v, succ, pos)) = work.last_mut() {
                let v = *v;
                if let Some(&w) = succ.get(*pos) {
                    *pos += 1;
                    if index[w] == usize::MAX {
                        index[w] = next;
                        low[w] = next;
                        next += 1;
                        stack.push(w);
                        on_stack[w] = true;
                        work.push((w, self.edges[w].keys().copied().collect(), 0));
                    } else if on_stack[w] {
                        low[v] = low[v].min(index[w]);
                    }
                    continue;
                }
                work.pop();
                if let Some((u, _, _)) = work.last() {
                    low[*u] = low[*u].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut component = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        component.push(w);
                        if w == v {
                            break;
                        }
                    }
                    out.push(component);
                }
            }
        }
        out
    }
}

/// The crate roots of a workspace: for every `crates/*/Cargo.toml`, its
/// `src/lib.rs`, `src/main.rs` and `src/bin/*.rs`, labelled with the
/// package name (and the binary's name for `src/bin`).
pub fn workspace_roots(workspace: &Path) -> Result<Vec<(String, PathBuf)>, Error> {
    let crates = workspace.join("crates");
    let read_dir = |p: &Path| -> Result<Vec<PathBuf>, Error> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(p)
            .map_err(|e| Error::Read(p.to_path_buf(), e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        v.sort();
        Ok(v)
    };
    let mut out = Vec::new();
    for dir in read_dir(&crates)? {
        let manifest = dir.join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        let package = text
            .lines()
            .find_map(|l| {
                let l = l.trim();
                let v = l.strip_prefix("name")?.trim_start().strip_prefix('=')?;
                Some(v.trim().trim_matches('"').to_string())
            })
            .unwrap_or_else(|| dir.display().to_string());
        let src = dir.join("src");
        for root in ["lib.rs", "main.rs"] {
            if src.join(root).exists() {
                out.push((package.clone(), src.join(root)));
            }
        }
        if src.join("bin").is_dir() {
            for bin in read_dir(&src.join("bin"))? {
                let stem = bin.file_stem().map(|s| s.to_string_lossy().into_owned());
                let label = format!("{package} (bin {})", stem.unwrap_or_default());
                if bin.extension().is_some_and(|e| e == "rs") {
                    out.push((label, bin));
                } else if bin.join("main.rs").is_file() {
                    // A binary with modules of its own: src/bin/NAME/main.rs.
                    out.push((label, bin.join("main.rs")));
                }
            }
        }
    }
    Ok(out)
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::ExternCrate(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::ForeignMod(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::TraitAlias(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Union(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// `#[cfg(test)]` exactly (test-only code is not part of the module graph).
fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && matches!(&a.meta, syn::Meta::List(l) if l.tokens.to_string() == "test")
    })
}

/// Gathers the paths of one item (not descending into nested modules).
struct Collector {
    /// In the crate root: `pub use` is a re-export, not a reference.
    facade: bool,
    /// Inside a re-export of the facade (imports only, no references).
    reexporting: bool,
    file: PathBuf,
    imports: BTreeMap<String, Vec<String>>,
    refs: Vec<(Vec<String>, Evidence)>,
}

impl Collector {
    fn record(&mut self, path: Vec<String>, line: usize) {
        if self.reexporting {
            return;
        }
        let text = path.join("::");
        self.refs.push((
            path,
            Evidence {
                file: self.file.clone(),
                line,
                path: text,
            },
        ));
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree, line: usize) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree, line);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let name = n.ident.to_string();
                let full = if name == "self" {
                    prefix.clone()
                } else {
                    let mut f = prefix.clone();
                    f.push(name.clone());
                    f
                };
                if let Some(alias) = if name == "self" {
                    prefix.last().cloned()
                } else {
                    Some(name)
                } {
                    self.imports.insert(alias, full.clone());
                }
                self.record(full, line);
            }
            syn::UseTree::Rename(r) => {
                let mut full = prefix.clone();
                if r.ident != "self" {
                    full.push(r.ident.to_string());
                }
                self.imports.insert(r.rename.to_string(), full.clone());
                self.record(full, line);
            }
            syn::UseTree::Glob(_) => self.record(prefix.clone(), line),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t, line);
                }
            }
        }
    }

    /// Paths inside a macro's tokens: `ident (:: ident)+`, not `$crate`.
    fn tokens(&mut self, tokens: TokenStream) {
        let flat: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < flat.len() {
            match &flat[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(id) => {
                    let after_dollar =
                        i > 0 && matches!(&flat[i - 1], TokenTree::Punct(p) if p.as_char() == '$');
                    let mut path = vec![id.to_string()];
                    let mut j = i + 1;
                    while let (
                        Some(TokenTree::Punct(a)),
                        Some(TokenTree::Punct(b)),
                        Some(TokenTree::Ident(n)),
                    ) = (flat.get(j), flat.get(j + 1), flat.get(j + 2))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        path.push(n.to_string());
                        j += 3;
                    }
                    if path.len() >= 2 && !after_dollar {
                        self.record(path, id.span().start().line);
                        i = j;
                        continue;
                    }
                }
                TokenTree::Punct(_) | TokenTree::Literal(_) => {}
            }
            i += 1;
        }
    }
}

impl<'ast> Visit<'ast> for Collector {
    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {}

    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {}

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if u.leading_colon.is_none() && !is_cfg_test(&u.attrs) {
            let line = u.use_token.span.start().line;
            self.reexporting = self.facade && !matches!(u.vis, syn::Visibility::Inherited);
            self.use_tree(&mut Vec::new(), &u.tree, line);
            self.reexporting = false;
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.leading_colon.is_none() && p.segments.len() >= 2 {
            let path: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
            let line = p.segments[0].ident.span().start().line;
            self.record(path, line);
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.tokens(m.tokens.clone());
        syn::visit::visit_macro(self, m);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(files: &[(&str, &str)]) -> ModuleGraph {
        let files: BTreeMap<PathBuf, String> = files
            .iter()
            .map(|(p, s)| (PathBuf::from(p), (*s).to_string()))
            .collect();
        ModuleGraph::build("t", Path::new("src/lib.rs"), &mut |p| {
            Ok(files.get(p).cloned())
        })
        .expect("valid sources")
    }

    #[test]
    fn a_use_loop_is_found_with_its_evidence() {
        let g = graph(&[
            ("src/lib.rs", "mod a;\nmod b;\npub use a::A;"),
            ("src/a.rs", "use crate::b::B;\npub struct A;"),
            ("src/b.rs", "pub struct B;\nfn f() { let _ = super::a::A; }"),
        ]);
        let cycles = g.cycles();
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        assert_eq!(cycles[0].names(), "crate::a -> crate::b -> crate::a");
        assert_eq!(cycles[0].steps[0].1.path, "crate::b::B");
        assert_eq!(cycles[0].steps[0].1.line, 1);
        assert_eq!(cycles[0].steps[1].1.path, "super::a::A");
        assert_eq!(cycles[0].steps[1].1.file, PathBuf::from("src/b.rs"));
    }

    #[test]
    fn a_root_reexport_is_followed_to_the_defining_module() {
        // `crate::B` is b's item re-exported by the root: a → b, not a → root.
        let g = graph(&[
            ("src/lib.rs", "mod a;\nmod b;\npub use b::B;\npub use a::A;"),
            ("src/a.rs", "pub struct A(crate::B);"),
            ("src/b.rs", "pub struct B;\nfn f(_: crate::A) {}"),
        ]);
        assert_eq!(g.dependencies("crate::a"), ["crate::b"]);
        assert_eq!(g.cycles()[0].names(), "crate::a -> crate::b -> crate::a");
    }

    #[test]
    fn test_modules_doc_comments_and_leaves_are_ignored() {
        let g = graph(&[
            ("src/lib.rs", "pub mod a;\npub mod b;"),
            (
                "src/a.rs",
                "//! See [`crate::b::B`].\n/// [`crate::b`]\npub struct A;\n\
                 #[cfg(test)]\nmod tests { use crate::b::B; }",
            ),
            ("src/b.rs", "use crate::a::A;\npub struct B(A);"),
        ]);
        assert!(g.cycles().is_empty());
        assert_eq!(g.dependencies("crate::b"), ["crate::a"]);
        assert!(g.dependencies("crate::a").is_empty());
    }

    #[test]
    fn macro_tokens_nested_and_inline_modules_count() {
        let g = graph(&[
            ("src/lib.rs", "mod outer;\nmod c { pub fn f() { super::outer::inner::g() } }"),
            ("src/outer/mod.rs", "pub mod inner;"),
            (
                "src/outer/inner.rs",
                "pub fn g() { assert!(crate::c::f() == ()); }\nmacro_rules! m { () => { $crate::x } }",
            ),
        ]);
        assert_eq!(g.dependencies("crate::outer::inner"), ["crate::c"]);
        assert_eq!(g.dependencies("crate::c"), ["crate::outer::inner"]);
        assert_eq!(g.cycles().len(), 1);
    }

    #[test]
    fn root_reexports_are_the_facade_but_root_code_is_not() {
        let facade = graph(&[
            ("src/lib.rs", "mod a;\npub use a::run;\npub struct Error;"),
            ("src/a.rs", "pub fn run() -> crate::Error { crate::Error }"),
        ]);
        assert!(facade.cycles().is_empty());
        let code = graph(&[
            (
                "src/lib.rs",
                "mod a;\npub struct Error;\nfn main() { a::run(); }",
            ),
            ("src/a.rs", "pub fn run() -> crate::Error { crate::Error }"),
        ]);
        assert_eq!(code.cycles()[0].names(), "crate -> crate::a -> crate");
    }

    #[test]
    fn an_imported_module_name_is_resolved() {
        let g = graph(&[
            ("src/lib.rs", "mod a;\nmod b;"),
            ("src/a.rs", "use crate::b;\nfn f() -> usize { b::N }"),
            ("src/b.rs", "pub const N: usize = 1;"),
        ]);
        assert_eq!(g.dependencies("crate::a"), ["crate::b"]);
        assert!(g.cycles().is_empty());
    }
}
