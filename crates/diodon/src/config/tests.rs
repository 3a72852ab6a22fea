//! Flags and the TOML file agree; merging rules.
use super::*;
use crate::args::{Cli, Command, LinkArgs};
use clap::Parser;
use std::path::Path;

#[test]
fn toml_matches_flags() {
    let f: FileConfig = toml::from_str(
        "rate = \"1gbit\"\nrepair = 20\nkey-file = \"/k\"\nonce = true\nchannels = 2\n",
    )
    .unwrap();
    assert_eq!(f.channels, Some(2));
    assert_eq!(f.rate.as_deref(), Some("1gbit"));
    assert_eq!(f.repair, Some(20));
    assert!(toml::from_str::<FileConfig>("bogus = 1").is_err());
    let link = Link::merge(
        &LinkArgs {
            repair: Some(5),
            ..LinkArgs::default()
        },
        &FileConfig::default(),
    )
    .unwrap();
    assert_eq!(link.repair.get(), 5);
    assert_eq!(link.rate.bps(), 950_000_000);
}

#[test]
fn channels_implies_once_and_must_be_positive() {
    let recv = |args: &[&str]| -> Result<RecvSettings> {
        let cli = Cli::try_parse_from(
            [
                "diodon",
                "recv",
                "--listen",
                "127.0.0.1:7700",
                "--out",
                "/o",
            ]
            .iter()
            .chain(args),
        )?;
        let Command::Recv(r) = cli.cmd else {
            panic!("not recv")
        };
        r.resolve(&FileConfig::default())
    };
    let s = recv(&["--channels", "2"]).unwrap();
    assert!(s.once);
    assert_eq!(s.channels, Some(2));
    let s = recv(&[]).unwrap();
    assert!(!s.once);
    assert_eq!(s.channels, None);
    assert!(recv(&["--channels", "0"]).is_err());
}

#[test]
fn quarantine_bounds_come_from_flags_or_the_file() {
    let recv = |args: &[&str], file: &str| -> Result<RecvSettings> {
        let cli = Cli::try_parse_from(
            ["diodon", "recv", "--listen", "127.0.0.1:7700"]
                .iter()
                .chain(args),
        )?;
        let Command::Recv(r) = cli.cmd else {
            panic!("not recv")
        };
        r.resolve(&toml::from_str(file)?)
    };
    let d = recv(&[], "").unwrap().quarantine;
    assert_eq!(d, QuarantineLimits::default());
    assert_eq!(d.max_bytes, QuarantineBytes::Auto);
    assert_eq!(d.max_entries, 1000);
    let q = recv(
        &["--quarantine-bytes", "64MiB", "--quarantine-entries", "7"],
        "",
    )
    .unwrap()
    .quarantine;
    assert_eq!(q.max_bytes, QuarantineBytes::Bytes(64 << 20));
    assert_eq!(q.max_entries, 7);
    let q = recv(&[], "quarantine-bytes = \"5%\"\nquarantine-entries = 9\n")
        .unwrap()
        .quarantine;
    assert_eq!(q.max_bytes, QuarantineBytes::Percent(5));
    assert_eq!(q.max_entries, 9);
    let q = recv(&["--quarantine-bytes", "1000"], "quarantine-bytes = 4096\n")
        .unwrap()
        .quarantine;
    assert_eq!(q.max_bytes, QuarantineBytes::Bytes(1000), "the flag wins");
    assert!(recv(&["--quarantine-bytes", "lots"], "").is_err());
    assert!(recv(&["--quarantine-entries", "0"], "").is_err());
    assert!(recv(&[], "quarantine-entries = 0\n").is_err());
    assert!(recv(&[], "quarantine-bytes = \"200%\"\n").is_err());
    // The held area: bytes and files, from the flags or the file.
    let h = recv(&[], "").unwrap().held;
    assert_eq!(h, HeldLimits::default());
    let h = recv(&["--held-bytes", "512MiB", "--held-files", "9"], "")
        .unwrap()
        .held;
    assert_eq!((h.max_bytes, h.max_files), (512 << 20, 9));
    let h = recv(&[], "held-bytes = \"1GiB\"\nheld-files = 3\n")
        .unwrap()
        .held;
    assert_eq!((h.max_bytes, h.max_files), (1 << 30, 3));
    let share = recv(&["--held-bytes", "5%"], "").unwrap_err().to_string();
    assert!(share.contains("not a share"), "{share}");
    assert!(recv(&[], "held-files = 0\n").is_err());
    assert!(recv(&["--held-files", "0"], "").is_err());
}

#[test]
fn expected_loss_chooses_the_repair_and_says_so() {
    let symbol = SymbolSize::new(1418).unwrap();
    let plan = |args: LinkArgs, toml: &str| {
        let f: FileConfig = toml::from_str(toml).unwrap();
        Link::merge(&args, &f).unwrap().repair_plan(symbol).unwrap()
    };
    let (r, ppm, note) = plan(LinkArgs::default(), "");
    assert_eq!((r.get(), ppm, note), (10, 10_000, None), "the defaults");
    let (r, ppm, note) = plan(LinkArgs::default(), "expected-loss = 5.0\n");
    assert!(r.get() > 10, "{r:?}");
    assert_eq!(ppm, 50_000);
    assert!(note.unwrap().starts_with("expected loss 5 %: repair"));
    let low = LinkArgs {
        expected_loss: Some(0.1),
        ..LinkArgs::default()
    };
    let (r, _, _) = plan(low, "");
    assert!(r.get() < 10, "0.1 % needs less than 10 %: {r:?}");
    let short = LinkArgs {
        expected_loss: Some(5.0),
        repair: Some(5),
        ..LinkArgs::default()
    };
    let (r, _, note) = plan(short, "");
    assert_eq!(r.get(), 5, "--repair wins");
    assert!(note.unwrap().contains("--repair 5 is less than"));
    let bad = LinkArgs {
        expected_loss: Some(120.0),
        ..LinkArgs::default()
    };
    assert!(Link::merge(&bad, &FileConfig::default()).is_err());
}

#[test]
fn the_sandbox_is_on_unless_a_flag_or_the_file_turns_it_off() {
    let recv = |args: &[&str], toml: &str| {
        let mut argv = vec!["diodon", "recv", "--listen", "127.0.0.1:1", "--stdout"];
        argv.extend_from_slice(args);
        let Command::Recv(r) = Cli::parse_from(argv).cmd else {
            panic!("recv")
        };
        let f: FileConfig = toml::from_str(toml).unwrap();
        crate::sandbox::options(&r.sandbox, &f, &r.link, false)
            .map_err(|e| e.1.to_string())
            .map(|o| o.off)
    };
    assert_eq!(recv(&[], ""), Ok(false));
    assert_eq!(recv(&["--no-sandbox"], ""), Ok(true));
    assert_eq!(recv(&[], "no-sandbox = true"), Ok(true));
    // The key file's folder is one of the paths the sandbox lets the process
    // read (SIGHUP reads the key file again, perhaps replaced by a new file).
    let Command::Send(s) = Cli::parse_from(["diodon", "send", "--to", "127.0.0.1:1", "x"]).cmd
    else {
        panic!("send")
    };
    let f: FileConfig = toml::from_str("key-file = \"/etc/diodon/k\"\nuser = \"nobody\"").unwrap();
    assert_eq!(f.user.as_deref(), Some("nobody"));
    if diodon_io::sandbox::is_root() {
        let o = crate::sandbox::options(&s.sandbox, &f, &s.link, false)
            .unwrap_or_else(|e| panic!("{}", e.1));
        assert_eq!(
            o.config_files,
            vec![std::path::PathBuf::from("/etc/diodon")]
        );
        assert_eq!(o.user.map(|u| u.name), Some("nobody".into()));
    }
}

#[test]
fn encrypt_needs_a_key_and_a_rollover_needs_a_next_key() {
    let dir = tempfile::tempdir().unwrap();
    let one = dir.path().join("one.key");
    std::fs::write(&one, "ab".repeat(32)).unwrap();
    let ring = dir.path().join("ring.key");
    std::fs::write(
        &ring,
        format!(
            "current 4 {}\nnext 5 {}\n",
            "ab".repeat(32),
            "cd".repeat(32)
        ),
    )
    .unwrap();
    let merge = |toml: &str| Link::merge(&LinkArgs::default(), &toml::from_str(toml).unwrap());
    let e = merge("encrypt = true").unwrap_err().to_string();
    assert!(e.contains("--encrypt needs --key-file"), "{e}");
    let with = |key: &Path, rest: &str| format!("key-file = {:?}\n{rest}", key.to_str().unwrap());
    let link = merge(&with(&one, "encrypt = true")).unwrap();
    assert!(link.integrity.is_encrypted());
    assert_eq!(
        link.symbol_size("10.0.0.1:1".parse().unwrap())
            .unwrap()
            .get(),
        1406
    );
    let e = merge(&with(&one, "encrypt = true\nnext-key-after = \"1s\""))
        .unwrap_err()
        .to_string();
    assert!(e.contains("a key file with a `next ID HEX` line"), "{e}");
    let link = merge(&with(&ring, "encrypt = true\nnext-key-after = \"90s\"")).unwrap();
    assert_eq!(link.next_key_after, Some(Duration::from_secs(90)));
    assert_eq!(
        link.integrity.key_ring().map(KeyRing::next_id),
        Some(Some(5))
    );
    // Without --encrypt the ring's keys are the MAC's (AES-GMAC unless
    // told otherwise), and it rolls over too.
    let link = merge(&with(&ring, "next-key-after = \"90s\"")).unwrap();
    assert!(matches!(&link.integrity, Integrity::Gmac(r)
        if r.current_id() == 4 && r.next_id() == Some(5)));
}

#[test]
fn kafka_passes_and_hold_come_from_flags_or_the_file() {
    let send = |args: &[&str], file: &str| -> Result<u32> {
        let cli = Cli::try_parse_from(
            [
                "diodon",
                "send",
                "--to",
                "10.0.0.2:7700",
                "--kafka",
                "b:9092",
            ]
            .iter()
            .chain(args),
        )?;
        let Command::Send(s) = cli.cmd else {
            panic!("not send")
        };
        let opts = crate::send::kafka_source(&s, &toml::from_str(file)?, "b:9092".into())
            .map_err(|e| e.1)?;
        Ok(opts.passes)
    };
    assert_eq!(send(&["--topic", "t"], "").unwrap(), 1);
    assert_eq!(send(&["--topic", "t"], "passes = 2").unwrap(), 2);
    assert_eq!(
        send(&["--topic", "t", "--passes", "3"], "passes = 2").unwrap(),
        3
    );
    assert!(send(&["--topic", "t", "--passes", "0"], "").is_err());
    assert!(send(&[], "").is_err(), "--kafka without --topic");

    let hold = |args: &[&str], file: &str| -> Result<usize> {
        let cli = Cli::try_parse_from(
            [
                "diodon",
                "recv",
                "--listen",
                "127.0.0.1:7700",
                "--kafka",
                "b:9092",
            ]
            .iter()
            .chain(args),
        )?;
        let Command::Recv(r) = cli.cmd else {
            panic!("not recv")
        };
        let file: FileConfig = toml::from_str(file)?;
        let settings = r.resolve(&file)?;
        match crate::recv::output(&r, &file, &settings).map_err(|e| e.1)? {
            diodon_apps::gateway::RecvOutput::Kafka(k) => Ok(k.hold_bytes),
            _ => panic!("not a Kafka output"),
        }
    };
    assert_eq!(
        hold(&[], "").unwrap(),
        diodon_apps::kafka::DEFAULT_HOLD_BYTES
    );
    assert_eq!(hold(&[], "kafka-hold = 8").unwrap(), 8 << 20);
    assert_eq!(
        hold(&["--kafka-hold", "16"], "kafka-hold = 8").unwrap(),
        16 << 20
    );
    assert!(hold(&["--kafka-hold", "0"], "").is_err());
}
