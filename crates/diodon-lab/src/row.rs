//! One trial as a row: the thesis's Table A.1 columns plus Diodon's, the
//! configuration it belongs to, and the CSV line it is written as and read
//! back from (the journal, `trials.csv`, `--resume`, `--report-only`).
//!
//! ```text
//!  Config (tool, rcvbuf, mtu, loss) + bitrate + trial ─► Row ─► csv() ─► "diodon,0,1500,…"
//!                                                         ▲
//!                                 from_csv() ◄────────────┘  (exact up to Xfer_time's ms)
//! ```

use crate::plan::Tool;

/// One configuration (everything but bitrate and trial number).
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Tool.
    pub tool: Tool,
    /// `net.core.rmem_*` for the run (0: unchanged).
    pub rcvbuf: u64,
    /// MTU.
    pub mtu: u32,
    /// Injected loss, percent.
    pub loss: f64,
}

impl Config {
    /// A file-name-safe label.
    pub fn label(&self) -> String {
        let buf = if self.rcvbuf == 0 {
            "default".to_owned()
        } else if self.rcvbuf.is_multiple_of(1 << 20) {
            format!("{}MiB", self.rcvbuf >> 20)
        } else {
            self.rcvbuf.to_string()
        };
        format!(
            "{}_rcvbuf-{buf}_mtu-{}_loss-{}",
            self.tool, self.mtu, self.loss
        )
    }
}

/// One trial: the thesis's Table A.1 plus Diodon's columns.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Configuration.
    pub config: Config,
    /// Mbit/s.
    pub bitrate: f64,
    /// 1-based.
    pub trial: u32,
    /// Sender exit code (128+signal when killed; -1 not run).
    pub sender_rc: i32,
    /// Receiver exit code.
    pub receiver_rc: i32,
    /// Seconds from sender start to receiver exit.
    pub xfer_time: f64,
    /// SHA-256 matched and both exited 0.
    pub xfer_success: bool,
    /// Bytes.
    pub in_file_size: u64,
    /// Bytes (0 when absent).
    pub out_file_size: u64,
    /// Guard counters and link/SNMP deltas; `None` → `na`.
    pub dtgrms_sent: Option<u64>,
    /// Received (receiver guard, after the link's loss).
    pub dtgrms_received: Option<u64>,
    /// `InCsumErrors` + Diodon's failed per-datagram checks.
    pub dtgrms_corrupt: Option<u64>,
    /// Sender link.
    pub tx_errors: u64,
    /// Sender link.
    pub tx_dropped: u64,
    /// Receiver link.
    pub rx_errors: u64,
    /// Receiver link (dropped + missed).
    pub rx_dropped: u64,
    /// Sender UDP MIB.
    pub snmp_out_datagrams: u64,
    /// Sender UDP MIB.
    pub snmp_sndbuf_errors: u64,
    /// Receiver UDP MIB.
    pub snmp_in_datagrams: u64,
    /// Receiver UDP MIB.
    pub snmp_in_errors: u64,
    /// Receiver UDP MIB.
    pub snmp_rcvbuf_errors: u64,
    /// Receiver IP MIB: fragments whose datagram could not be reassembled
    /// (a fragment lost, or reassembly memory full); such datagrams never
    /// reach UDP (only tools that send datagrams larger than the MTU).
    pub snmp_reasm_fails: u64,
    /// Diodon: source symbols missing.
    pub missing: Option<u64>,
    /// Diodon: recovered by FEC.
    pub recovered: Option<u64>,
    /// Diodon: `SO_RXQ_OVFL` drops.
    pub socket_drops: Option<u64>,
    /// Repair overhead as a fraction of the data (pydiode: redundancy − 1).
    pub repair_ratio: Option<f64>,
    /// Receive buffer the receiving application ended up with (Diodon reports it).
    pub app_rcvbuf: Option<u64>,
    /// Why it failed (empty on success).
    pub reason: String,
}

/// The CSV header: configuration, Table A.1, extras.
pub const CSV_HEADER: &str = "tool,rcvbuf,mtu,bitrate,trial,sender_rc,receiver_rc,Xfer_time,Xfer_success,in_file_size,out_file_size,dtgrms_sent,dtgrms_received,dtgrms_corrupt,tx_errors,tx_dropped,rx_errors,rx_dropped,snmp_OutDatagrams,snmp_SndbufErrors,snmp_InDatagrams,snmp_InErrors,snmp_RcvbufErrors,snmp_ReasmFails,missing,recovered,socket_drops,repair_ratio,injected_loss,app_rcvbuf,reason";

fn na<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "na".to_owned(), |v| v.to_string())
}

impl Row {
    /// A transfer time as `trials.csv` records it (milliseconds): rows
    /// measured in this run then report exactly what the same rows read back
    /// from the file report (`--report-only`), even where an average falls
    /// on a rounding boundary.
    pub fn recorded_seconds(d: std::time::Duration) -> f64 {
        (d.as_secs_f64() * 1000.0).round() / 1000.0
    }

    /// One CSV line (no newline).
    pub fn csv(&self) -> String {
        let c = &self.config;
        [
            c.tool.to_string(),
            c.rcvbuf.to_string(),
            c.mtu.to_string(),
            self.bitrate.to_string(),
            self.trial.to_string(),
            self.sender_rc.to_string(),
            self.receiver_rc.to_string(),
            format!("{:.3}", self.xfer_time),
            if self.xfer_success { "True" } else { "False" }.to_owned(),
            self.in_file_size.to_string(),
            self.out_file_size.to_string(),
            na(self.dtgrms_sent),
            na(self.dtgrms_received),
            na(self.dtgrms_corrupt),
            self.tx_errors.to_string(),
            self.tx_dropped.to_string(),
            self.rx_errors.to_string(),
            self.rx_dropped.to_string(),
            self.snmp_out_datagrams.to_string(),
            self.snmp_sndbuf_errors.to_string(),
            self.snmp_in_datagrams.to_string(),
            self.snmp_in_errors.to_string(),
            self.snmp_rcvbuf_errors.to_string(),
            self.snmp_reasm_fails.to_string(),
            na(self.missing),
            na(self.recovered),
            na(self.socket_drops),
            na(self.repair_ratio),
            c.loss.to_string(),
            na(self.app_rcvbuf),
            self.reason.replace([',', '\n', '"'], ";"),
        ]
        .join(",")
    }

    /// One progress line: `CONFIG BITRATE Mbit/s #TRIAL: ok in 1.23 s (reason)`.
    pub fn progress(&self) -> String {
        format!(
            "{} {} Mbit/s #{}: {} in {:.2} s{}",
            self.config.label(),
            self.bitrate,
            self.trial,
            if self.xfer_success { "ok" } else { "FAILED" },
            self.xfer_time,
            if self.reason.is_empty() {
                String::new()
            } else {
                format!(" ({})", self.reason)
            }
        )
    }

    /// Parses a line written by [`Row::csv`] (the resumed run's rows). The
    /// `reason` comes back as written (commas had become `;`), `Xfer_time`
    /// to the millisecond.
    pub fn from_csv(line: &str) -> Result<Row, String> {
        let f: Vec<&str> = line.split(',').collect();
        let want = CSV_HEADER.split(',').count();
        if f.len() != want {
            return Err(format!("{} fields, not {want}", f.len()));
        }
        let name = |i: usize| CSV_HEADER.split(',').nth(i).unwrap_or("?");
        let num = |i: usize| -> Result<u64, String> {
            f[i].parse()
                .map_err(|_| format!("{}: {:?} is not a count", name(i), f[i]))
        };
        let int = |i: usize| -> Result<i32, String> {
            f[i].parse()
                .map_err(|_| format!("{}: {:?} is not an exit code", name(i), f[i]))
        };
        let real = |i: usize| -> Result<f64, String> {
            f[i].parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| format!("{}: {:?} is not a number", name(i), f[i]))
        };
        let opt = |i: usize| -> Result<Option<u64>, String> {
            if f[i] == "na" {
                Ok(None)
            } else {
                num(i).map(Some)
            }
        };
        let tool = Tool::parse(f[0]).map_err(|e| format!("tool: {e}"))?;
        Ok(Row {
            config: Config {
                tool,
                rcvbuf: num(1)?,
                mtu: u32::try_from(num(2)?).map_err(|_| "mtu: out of range".to_owned())?,
                loss: real(28)?,
            },
            bitrate: real(3)?,
            trial: u32::try_from(num(4)?).map_err(|_| "trial: out of range".to_owned())?,
            sender_rc: int(5)?,
            receiver_rc: int(6)?,
            xfer_time: real(7)?,
            xfer_success: match f[8] {
                "True" => true,
                "False" => false,
                other => return Err(format!("Xfer_success: {other:?} is not True/False")),
            },
            in_file_size: num(9)?,
            out_file_size: num(10)?,
            dtgrms_sent: opt(11)?,
            dtgrms_received: opt(12)?,
            dtgrms_corrupt: opt(13)?,
            tx_errors: num(14)?,
            tx_dropped: num(15)?,
            rx_errors: num(16)?,
            rx_dropped: num(17)?,
            snmp_out_datagrams: num(18)?,
            snmp_sndbuf_errors: num(19)?,
            snmp_in_datagrams: num(20)?,
            snmp_in_errors: num(21)?,
            snmp_rcvbuf_errors: num(22)?,
            snmp_reasm_fails: num(23)?,
            missing: opt(24)?,
            recovered: opt(25)?,
            socket_drops: opt(26)?,
            repair_ratio: if f[27] == "na" { None } else { Some(real(27)?) },
            app_rcvbuf: opt(29)?,
            reason: f[30].to_owned(),
        })
    }
}

/// A row for unit tests here and in `resume`.
#[cfg(test)]
pub(crate) mod tests_support {
    use super::{Config, Row, Tool};

    pub(crate) fn row() -> Row {
        Row {
            config: Config {
                tool: Tool::Netcat,
                rcvbuf: 4 << 20,
                mtu: 1500,
                loss: 0.0,
            },
            bitrate: 100.0,
            trial: 1,
            sender_rc: 0,
            receiver_rc: 0,
            xfer_time: 1.5,
            xfer_success: true,
            in_file_size: 10,
            out_file_size: 10,
            dtgrms_sent: Some(3),
            dtgrms_received: None,
            dtgrms_corrupt: Some(0),
            tx_errors: 0,
            tx_dropped: 0,
            rx_errors: 0,
            rx_dropped: 0,
            snmp_out_datagrams: 3,
            snmp_sndbuf_errors: 0,
            snmp_in_datagrams: 3,
            snmp_in_errors: 0,
            snmp_rcvbuf_errors: 0,
            snmp_reasm_fails: 0,
            missing: None,
            recovered: None,
            socket_drops: None,
            repair_ratio: Some(0.0),
            app_rcvbuf: None,
            reason: "a, b".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::row;
    use super::*;

    #[test]
    fn csv_line_matches_header() {
        let r = row();
        let line = r.csv();
        assert_eq!(
            line.split(',').count(),
            CSV_HEADER.split(',').count(),
            "{line}"
        );
        assert!(line.starts_with("netcat,4194304,1500,100,1,0,0,1.500,True,10,10,3,na,0,"));
        assert!(line.ends_with(",na,na,na,0,0,na,a; b"), "{line}");
        assert_eq!(r.config.label(), "netcat_rcvbuf-4MiB_mtu-1500_loss-0");
        assert_eq!(
            r.progress(),
            "netcat_rcvbuf-4MiB_mtu-1500_loss-0 100 Mbit/s #1: ok in 1.50 s (a, b)"
        );
    }

    #[test]
    fn rows_survive_the_csv_round_trip() {
        let mut r = row();
        r.reason = "SHA-256 differs (3 of 10 bytes)".into();
        r.missing = Some(7);
        r.repair_ratio = Some(0.1);
        r.config.loss = 0.1;
        r.config.tool = Tool::Pydiode(2);
        let back = Row::from_csv(&r.csv()).expect("parses");
        assert_eq!(back, r);
        for ns in [1, 94_500_000, 95_499_999, 5_066_500_000, 123_456_789_012] {
            let mut r = row();
            r.xfer_time = Row::recorded_seconds(std::time::Duration::from_nanos(ns));
            let back = Row::from_csv(&r.csv()).expect("parses");
            assert_eq!(back.xfer_time.to_bits(), r.xfer_time.to_bits(), "{ns} ns");
        }
        assert!(Row::from_csv("diodon,1,2").is_err());
        let mut bad = r.csv();
        bad = bad.replacen("pydiode-r2", "ftp", 1);
        assert!(Row::from_csv(&bad).unwrap_err().contains("tool"));
    }
}
