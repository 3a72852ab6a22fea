//! Everything that touches key material, and the keys themselves: the keyed
//! MACs (BLAKE3's keyed hash, and AES-GMAC under a per-session key), the key ring (the current pre-shared key and the next one,
//! each with its key id), the per-session key derived from a pre-shared
//! key, the nonce built from the sequence number, and sealing and opening a
//! datagram body with ChaCha20-Poly1305 (AWS-LC's, through `aws-lc-rs`: its
//! assembly runs the cipher and the authenticator at the CPU's vector
//! width). [`crate::wire`] decides where the results go in a datagram;
//! nothing else in the workspace sees a key.
//!
//! ```text
//!  pre-shared key (32) ─┐
//!  session id (64, BE) ─┼─► BLAKE3 derive_key(DERIVE_CONTEXT) ─► session key (32)
//!  key id (8) ──────────┘                                            │
//!  sequence (64) ─► nonce = 00 00 00 00 ‖ sequence (BE) ─────────────┤
//!  common header (32 bytes) ─► associated data ──────────────────────┤
//!  body ─────────────────────────────────────────► ChaCha20-Poly1305 ─► ciphertext ‖ tag (16)
//! ```
//!
//! Key material is wiped when dropped (`zeroize` here; AWS-LC cleanses the
//! cipher's key schedule when it frees it); tags are compared in constant
//! time.

use aws_lc_rs::aead::{
    Aad, Algorithm, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, CHACHA20_POLY1305,
};
use thiserror::Error;
use zeroize::{Zeroize, Zeroizing};

/// Length of a pre-shared key and of a derived session key.
pub const KEY_LEN: usize = 32;
/// Length of the MAC and of the AEAD tag.
pub const TAG_LEN: usize = 16;
/// The BLAKE3 `derive_key` context of the per-session AEAD key (PROTOCOL.md
/// § 4.3). Changing it changes every encrypted datagram.
pub const DERIVE_CONTEXT: &str =
    "diodon one-way protocol v1 2026-11-25 session key ChaCha20-Poly1305";
/// The BLAKE3 `derive_key` context of the per-session AES-GMAC key
/// (PROTOCOL.md § 4.5). Changing it changes every AES-GMAC tag.
pub const GMAC_DERIVE_CONTEXT: &str =
    "diodon one-way protocol v1 2026-11-27 session key AES-256-GMAC";
/// The first sequence number a sender may not use: a session ends before
/// it (the sender stops sending), so `(session key, nonce)` never repeats
/// and the sequence number never wraps.
pub const SEQ_LIMIT: u64 = u64::MAX;

/// A 32-byte secret, wiped when dropped; its `Debug` shows no byte.
#[derive(Clone)]
pub struct Secret([u8; KEY_LEN]);

impl Secret {
    /// Wraps key bytes.
    pub fn new(bytes: [u8; KEY_LEN]) -> Self {
        Secret(bytes)
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        ct_eq(&self.0, &other.0)
    }
}
impl Eq for Secret {}

/// Why a key ring cannot be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum KeyRingError {
    /// The current and the next key carry the same key id.
    #[error("the current and the next key both have key id {0}: give the next key another id")]
    SameId(u8),
    /// The current and the next key are the same bytes.
    #[error("the next key is the current key: a rollover needs a new key")]
    SameKey,
}

/// The pre-shared keys a side holds: the current key and, during a
/// rollover, the next one, each named by a key id (0 … 255) that every
/// encrypted datagram carries. A receiver opens datagrams of either; a
/// sender seals with the current key until it switches to the next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRing {
    current: (u8, Secret),
    next: Option<(u8, Secret)>,
}

impl KeyRing {
    /// One key, id 0 (the single-key key files).
    pub fn single(key: [u8; KEY_LEN]) -> Self {
        KeyRing {
            current: (0, Secret::new(key)),
            next: None,
        }
    }

    /// The current key and optionally the next, with their ids.
    pub fn new(current: (u8, Secret), next: Option<(u8, Secret)>) -> Result<Self, KeyRingError> {
        if let Some((id, key)) = &next {
            if *id == current.0 {
                return Err(KeyRingError::SameId(*id));
            }
            if *key == current.1 {
                return Err(KeyRingError::SameKey);
            }
        }
        Ok(KeyRing { current, next })
    }

    /// The current key's id.
    pub fn current_id(&self) -> u8 {
        self.current.0
    }

    /// The current key (also the key of the keyed MAC).
    pub fn current_key(&self) -> &Secret {
        &self.current.1
    }

    /// The next key's id, if the ring holds one.
    pub fn next_id(&self) -> Option<u8> {
        self.next.as_ref().map(|(id, _)| *id)
    }

    /// The key with this id.
    pub fn key(&self, id: u8) -> Option<&Secret> {
        if id == self.current.0 {
            return Some(&self.current.1);
        }
        self.next
            .as_ref()
            .filter(|(next, _)| *next == id)
            .map(|(_, key)| key)
    }
}

/// The per-session key: BLAKE3 `derive_key` with [`DERIVE_CONTEXT`] over
/// the pre-shared key, the session id (8 bytes, big-endian) and the key id.
pub fn session_key(psk: &Secret, session: u64, key_id: u8) -> Zeroizing<[u8; KEY_LEN]> {
    derive_session_key(DERIVE_CONTEXT, psk, session, key_id)
}

/// BLAKE3 `derive_key` with `context` over the pre-shared key, the session
/// id (8 bytes, big-endian) and the key id.
fn derive_session_key(
    context: &str,
    psk: &Secret,
    session: u64,
    key_id: u8,
) -> Zeroizing<[u8; KEY_LEN]> {
    let mut material = Zeroizing::new([0u8; KEY_LEN + 9]);
    material[..KEY_LEN].copy_from_slice(psk.bytes());
    material[KEY_LEN..KEY_LEN + 8].copy_from_slice(&session.to_be_bytes());
    material[KEY_LEN + 8] = key_id;
    Zeroizing::new(blake3::derive_key(context, &material[..]))
}

/// The 96-bit nonce of the datagram with sequence number `seq`: four zero
/// bytes, then the sequence number big-endian.
pub fn nonce(seq: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&seq.to_be_bytes());
    n
}

/// The keyed MAC of `content`: the first 16 bytes of BLAKE3's keyed hash.
pub fn mac(key: &Secret, content: &[u8]) -> [u8; TAG_LEN] {
    mac_of_pieces(key, &[content])
}

/// The keyed MAC of `pieces` one after the other (the same tag as
/// [`mac`] of their concatenation).
pub fn mac_of_pieces(key: &Secret, pieces: &[&[u8]]) -> [u8; TAG_LEN] {
    let mut hasher = blake3::Hasher::new_keyed(key.bytes());
    for piece in pieces {
        hasher.update(piece);
    }
    let mut tag = [0u8; TAG_LEN];
    tag.copy_from_slice(&hasher.finalize().as_bytes()[..TAG_LEN]);
    tag
}

/// Whether `tag` is the MAC of `content`, compared in constant time.
pub fn mac_matches(key: &Secret, content: &[u8], tag: &[u8]) -> bool {
    ct_eq(&mac(key, content), tag)
}

/// Equal length and bytes, in time that depends on the length only.
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// An encrypted datagram did not open: wrong key, or altered on the way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("the datagram does not open with this key (wrong key, or altered)")]
pub struct OpenError;

/// An AWS-LC key of one session under one key id, derived from the
/// pre-shared key with a context of its own per use.
struct SessionKey {
    key: LessSafeKey,
    session: u64,
    key_id: u8,
}

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionKey")
            .field("session", &format_args!("{:016x}", self.session))
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

impl SessionKey {
    /// The `algorithm` key of `session` (and `key_id`) derived from `psk`
    /// with `context` (both algorithms here take a 32-byte key).
    fn derive(
        context: &str,
        algorithm: &'static Algorithm,
        psk: &Secret,
        session: u64,
        key_id: u8,
    ) -> Self {
        let key = derive_session_key(context, psk, session, key_id);
        SessionKey {
            key: LessSafeKey::new(
                UnboundKey::new(algorithm, &key[..]).expect("a 32-byte key for a 256-bit cipher"),
            ),
            session,
            key_id,
        }
    }
}

/// The AEAD of one session under one key id.
#[derive(Debug)]
pub struct SessionCipher(SessionKey);

impl SessionCipher {
    /// Derives the session key of `session` from `psk` (with its `key_id`).
    pub fn derive(psk: &Secret, session: u64, key_id: u8) -> Self {
        SessionCipher(SessionKey::derive(
            DERIVE_CONTEXT,
            &CHACHA20_POLY1305,
            psk,
            session,
            key_id,
        ))
    }

    /// The key id datagrams sealed with this cipher carry.
    pub fn key_id(&self) -> u8 {
        self.0.key_id
    }

    /// The session it belongs to.
    pub fn session(&self) -> u64 {
        self.0.session
    }

    /// Encrypts `body` in place with `header` as associated data; returns the tag.
    pub fn seal(&self, seq: u64, header: &[u8], body: &mut [u8]) -> [u8; TAG_LEN] {
        let tag = self
            .0
            .key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce(seq)),
                Aad::from(header),
                body,
            )
            .expect("a datagram body is far below ChaCha20-Poly1305's 256 GiB message limit");
        let mut out = [0u8; TAG_LEN];
        out.copy_from_slice(tag.as_ref());
        out
    }

    /// Checks `tag` over `header` and `ciphertext` and, if it is right,
    /// writes the plaintext into `out` (as long as `ciphertext`).
    pub fn open(
        &self,
        seq: u64,
        header: &[u8],
        ciphertext: &[u8],
        out: &mut [u8],
        tag: &[u8],
    ) -> Result<(), OpenError> {
        if tag.len() != TAG_LEN || ciphertext.len() != out.len() {
            return Err(OpenError);
        }
        self.0
            .key
            .open_separate_gather(
                Nonce::assume_unique_for_key(nonce(seq)),
                Aad::from(header),
                ciphertext,
                tag,
                out,
            )
            .map_err(|_| OpenError)
    }
}

/// The AES-GMAC of one session under one key id: the AES-256-GCM tag of
/// an empty plaintext with the datagram as associated data, under a key
/// derived per session ([`GMAC_DERIVE_CONTEXT`]) and the nonce of the
/// datagram's sequence number (PROTOCOL.md § 4.5). AES-NI and carry-less
/// multiply make it 7–14× cheaper per datagram than BLAKE3's keyed hash on
/// this project's machine (BENCHMARKS.md, "Encryption").
#[derive(Debug)]
pub struct SessionMac(SessionKey);

impl SessionMac {
    /// Derives the AES-GMAC key of `session` from `psk` (with its `key_id`).
    pub fn derive(psk: &Secret, session: u64, key_id: u8) -> Self {
        SessionMac(SessionKey::derive(
            GMAC_DERIVE_CONTEXT,
            &AES_256_GCM,
            psk,
            session,
            key_id,
        ))
    }

    /// The key id the tagged datagrams carry.
    pub fn key_id(&self) -> u8 {
        self.0.key_id
    }

    /// The session it belongs to.
    pub fn session(&self) -> u64 {
        self.0.session
    }

    /// The tag of the datagram with sequence number `seq` whose covered
    /// bytes are `pieces`, one after the other (gathered into one buffer
    /// first when there are several: the cipher takes its associated data
    /// in one piece).
    pub fn tag(&self, seq: u64, pieces: &[&[u8]]) -> [u8; TAG_LEN] {
        thread_local! {
            static GATHERED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let seal = |aad: &[u8]| {
            let tag = self
                .0
                .key
                .seal_in_place_separate_tag(
                    Nonce::assume_unique_for_key(nonce(seq)),
                    Aad::from(aad),
                    &mut [],
                )
                .expect("a datagram is far below AES-GCM's associated data limit");
            let mut out = [0u8; TAG_LEN];
            out.copy_from_slice(tag.as_ref());
            out
        };
        match pieces {
            [one] => seal(one),
            _ => GATHERED.with_borrow_mut(|buf| {
                buf.clear();
                for piece in pieces {
                    buf.extend_from_slice(piece);
                }
                seal(buf)
            }),
        }
    }

    /// Whether `tag` is the tag of `content`, compared in constant time.
    pub fn matches(&self, seq: u64, content: &[u8], tag: &[u8]) -> bool {
        ct_eq(&self.tag(seq, &[content]), tag)
    }
}

/// How many sessions' ciphers a receiver keeps (two sessions, each under
/// two key ids, covers a sender restart during a rollover).
const CACHED: usize = 4;

/// The receiver's ciphers of the sessions it lately opened datagrams of: a
/// key is derived once per session and key id, not per datagram. A cipher
/// enters only after a datagram opened with it, so forged session ids cost
/// a derivation each but never push out a working cipher.
#[derive(Debug, Default)]
pub struct CipherCache {
    ring: Option<KeyRing>,
    entries: Vec<SessionCipher>,
    macs: Vec<SessionMac>,
}

impl CipherCache {
    /// A cache for the keys of `ring` (`None`: nothing opens).
    pub fn new(ring: Option<KeyRing>) -> Self {
        CipherCache {
            ring,
            entries: Vec::with_capacity(CACHED),
            macs: Vec::with_capacity(CACHED),
        }
    }

    /// Whether `tag` is the AES-GMAC of `content` (a datagram with
    /// sequence number `seq`) under the key of `session` and `key_id`; a
    /// key id the ring does not hold does not match. Keyed like
    /// [`CipherCache::open`]: a derivation per session and key id, kept
    /// only once a datagram matched.
    pub fn gmac_matches(
        &mut self,
        session: u64,
        key_id: u8,
        seq: u64,
        content: &[u8],
        tag: &[u8],
    ) -> bool {
        with_session_key(
            &mut self.macs,
            self.ring.as_ref(),
            (session, key_id),
            |psk| SessionMac::derive(psk, session, key_id),
            |mac| mac.matches(seq, content, tag),
        )
    }

    /// Opens like [`SessionCipher::open`] with the cipher of `session` and
    /// `key_id`; a key id the ring does not hold does not open.
    #[expect(clippy::too_many_arguments, reason = "the AEAD's inputs, named")]
    pub fn open(
        &mut self,
        session: u64,
        key_id: u8,
        seq: u64,
        header: &[u8],
        ciphertext: &[u8],
        out: &mut [u8],
        tag: &[u8],
    ) -> Result<(), OpenError> {
        let opened = with_session_key(
            &mut self.entries,
            self.ring.as_ref(),
            (session, key_id),
            |psk| SessionCipher::derive(psk, session, key_id),
            |cipher| cipher.open(seq, header, ciphertext, &mut *out, tag).is_ok(),
        );
        if opened {
            Ok(())
        } else {
            Err(OpenError)
        }
    }
}

/// What a cache entry holds: a key of one session under one key id.
trait OfSession {
    fn key(&self) -> &SessionKey;
}

impl OfSession for SessionCipher {
    fn key(&self) -> &SessionKey {
        &self.0
    }
}

impl OfSession for SessionMac {
    fn key(&self) -> &SessionKey {
        &self.0
    }
}

/// `check` with the entry of `session` and `key_id` in `entries`, or with
/// one `derive`d from the ring's key of that id, which `entries` keeps
/// (dropping its oldest past [`CACHED`]) only if `check` passed; `false`
/// for a key id the ring does not hold.
fn with_session_key<T: OfSession>(
    entries: &mut Vec<T>,
    ring: Option<&KeyRing>,
    (session, key_id): (u64, u8),
    derive: impl FnOnce(&Secret) -> T,
    mut check: impl FnMut(&T) -> bool,
) -> bool {
    if let Some(entry) = entries
        .iter()
        .find(|e| e.key().session == session && e.key().key_id == key_id)
    {
        return check(entry);
    }
    let Some(psk) = ring.and_then(|r| r.key(key_id)) else {
        return false;
    };
    let entry = derive(psk);
    if !check(&entry) {
        return false;
    }
    if entries.len() == CACHED {
        entries.remove(0);
    }
    entries.push(entry);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const PSK: [u8; 32] = *b"diodon-example-key-32-bytes-long";
    const SESSION: u64 = 0x0123_4567_89ab_cdef;
    /// The data symbol's header (sequence 2, channel 1, key id 0).
    const HEADER: &str = "0100000301234567 89abcdef00000000 0000000200000001 000005dc07d00017";
    const BODY: &str = "0000000000000000 0000000100010005 0001 68656c6c6f";

    fn unhex(text: &str) -> Vec<u8> {
        hex::decode(text.replace(' ', "")).expect("hex")
    }

    /// PROTOCOL.md § 11, "Encrypted datagrams": exactly the vectors there.
    #[test]
    fn the_documented_vectors() {
        let psk = Secret::new(PSK);
        assert_eq!(
            hex::encode(*session_key(&psk, SESSION, 0)),
            "a0a94c1454833000e2f63c70954950c320b40b1b2d7a4dd77d7165582b9d7f70"
        );
        assert_eq!(
            hex::encode(*session_key(&psk, SESSION, 7)),
            "d0e3565b320edb3e9af9f10f982f4406244e195af72e461d14f601fd0101af95"
        );
        assert_eq!(hex::encode(nonce(2)), "000000000000000000000002");
        let header = unhex(HEADER);
        let mut body = unhex(BODY);
        let tag = SessionCipher::derive(&psk, SESSION, 0).seal(2, &header, &mut body);
        assert_eq!(
            hex::encode(&body),
            "a882528346c94627aae63dbf6d211ac12a3421aaeaa4df"
        );
        assert_eq!(hex::encode(tag), "2dd44a9384d6eecc1994539b7215332f");
    }

    #[test]
    fn the_gmac_vector_matches_an_independent_aes_gcm() {
        // The key derived with the GMAC context, and the tag that Python's
        // `cryptography` (OpenSSL) computes for it: AESGCM(key).encrypt(
        // 00000000 ‖ seq, b"", header ‖ body) with seq 2.
        let psk = Secret::new(PSK);
        assert_eq!(
            hex::encode(*derive_session_key(GMAC_DERIVE_CONTEXT, &psk, SESSION, 0)),
            "fd2bda0d8bd1da184f3799c04cacb833506277d65a9d2569c16b7dfac1b04cd0"
        );
        let (header, body) = (unhex(HEADER), unhex(BODY));
        let mut content = header.clone();
        content.extend_from_slice(&body);
        let mac = SessionMac::derive(&psk, SESSION, 0);
        let tag = mac.tag(2, &[&content]);
        assert_eq!(hex::encode(tag), "1e6d818c921219483052d3ab6343cbc8");
        // In pieces, the same tag; any other sequence, key id or byte, not.
        assert_eq!(mac.tag(2, &[&header, &body]), tag);
        assert!(mac.matches(2, &content, &tag));
        assert!(!mac.matches(3, &content, &tag));
        assert!(!SessionMac::derive(&psk, SESSION, 1).matches(2, &content, &tag));
        assert!(!SessionMac::derive(&psk, SESSION + 1, 0).matches(2, &content, &tag));
        let mut altered = content.clone();
        altered[40] ^= 1;
        assert!(!mac.matches(2, &altered, &tag));
        // The AEAD's session key and the GMAC's differ (two contexts).
        assert_ne!(
            *session_key(&psk, SESSION, 0),
            *derive_session_key(GMAC_DERIVE_CONTEXT, &psk, SESSION, 0)
        );
    }

    #[test]
    fn the_cache_keeps_a_gmac_key_only_after_a_tag_matched() {
        let psk = Secret::new(PSK);
        let mut cache = CipherCache::new(Some(KeyRing::single(PSK)));
        let content = unhex(HEADER);
        let tag = SessionMac::derive(&psk, SESSION, 0).tag(9, &[&content]);
        assert!(!cache.gmac_matches(SESSION, 0, 9, &content, &[0; TAG_LEN]));
        assert!(cache.macs.is_empty(), "a forged tag cached a key");
        assert!(
            !cache.gmac_matches(SESSION, 3, 9, &content, &tag),
            "a key id the ring lacks"
        );
        assert!(cache.gmac_matches(SESSION, 0, 9, &content, &tag));
        assert!(
            cache.gmac_matches(SESSION, 0, 9, &content, &tag),
            "from the cache"
        );
        assert_eq!(cache.macs.len(), 1);
    }

    #[test]
    fn open_refuses_a_wrong_key_an_altered_header_body_or_tag() {
        let psk = Secret::new(PSK);
        let cipher = SessionCipher::derive(&psk, SESSION, 0);
        let header = unhex(HEADER);
        let mut sealed = unhex(BODY);
        let tag = cipher.seal(2, &header, &mut sealed);
        let mut out = vec![0u8; sealed.len()];
        cipher
            .open(2, &header, &sealed, &mut out, &tag)
            .expect("opens");
        assert_eq!(out, unhex(BODY));
        let other = SessionCipher::derive(&Secret::new([9; 32]), SESSION, 0);
        assert_eq!(
            other.open(2, &header, &sealed, &mut out, &tag),
            Err(OpenError)
        );
        let next_session = SessionCipher::derive(&psk, SESSION + 1, 0);
        assert_eq!(
            next_session.open(2, &header, &sealed, &mut out, &tag),
            Err(OpenError)
        );
        assert_eq!(
            cipher.open(3, &header, &sealed, &mut out, &tag),
            Err(OpenError)
        );
        let mut h = header.clone();
        h[25] ^= 1;
        assert_eq!(cipher.open(2, &h, &sealed, &mut out, &tag), Err(OpenError));
        let mut b = sealed.clone();
        b[0] ^= 0x80;
        assert_eq!(cipher.open(2, &header, &b, &mut out, &tag), Err(OpenError));
        let mut t = tag;
        t[15] ^= 1;
        assert_eq!(
            cipher.open(2, &header, &sealed, &mut out, &t),
            Err(OpenError)
        );
    }

    #[test]
    fn a_ring_holds_two_distinct_keys_and_the_cache_opens_both() {
        let next = Secret::new([5; 32]);
        assert_eq!(
            KeyRing::new((3, Secret::new(PSK)), Some((3, next.clone()))),
            Err(KeyRingError::SameId(3))
        );
        assert_eq!(
            KeyRing::new((3, Secret::new(PSK)), Some((4, Secret::new(PSK)))),
            Err(KeyRingError::SameKey)
        );
        let ring = KeyRing::new((3, Secret::new(PSK)), Some((4, next.clone()))).expect("ring");
        assert_eq!(format!("{ring:?}").matches("redacted").count(), 2);
        let mut cache = CipherCache::new(Some(ring));
        let header = unhex(HEADER);
        for (id, key) in [(3, Secret::new(PSK)), (4, next), (5, Secret::new([5; 32]))] {
            let mut body = unhex(BODY);
            let tag = SessionCipher::derive(&key, SESSION, id).seal(2, &header, &mut body);
            let mut out = vec![0u8; body.len()];
            let opened = cache.open(SESSION, id, 2, &header, &body, &mut out, &tag);
            assert_eq!(opened.is_ok(), id != 5, "key id {id}");
        }
    }
}
