public import Crypto
import Foundation
import HeraldModel
public import Logging
import NIOPosix
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The key-encryption keys of a service's secrets at rest: a folder of keys (`encryption-keys`),
/// or what a command prints (`encryption-key-command`: a KMS, a secret manager), one of them
/// current, never in the database, its logs or a backup.
///
/// The folder holds `<name>.key` files (32 random bytes, base64) and `current`, the name of the
/// key that wraps new data keys. The others stay readable: data wrapped by them is re-wrapped by
/// the current one (``SecretBox/rewrap(_:)``), after which they may go. ``reload()`` reads the
/// folder again, so `herald keys rotate` (a new key, made current) takes hold without a restart.
///
/// A command prints one key a line, `<name> <32 bytes in base64>`, the current key first (e.g.
/// `aws kms decrypt … | base64 -d`, `vault kv get -field=keyring herald/dispatch`, or `cat` of a
/// mounted Kubernetes Secret). It runs through `/bin/sh -c` off the event loops and the
/// cooperative pool, within 30 s and 64 KiB of output, at start and then at most every
/// ``commandRefresh``: a rotation is a new first line, taken up by the next run.
public final class Keyring: Sendable {
    /// One key-encryption key.
    public struct Key: Sendable {
        public let name: String
        /// The first 8 bytes of SHA-256 over a label and the key: what sealed data names its key by.
        public let id: [UInt8]
        let key: SymmetricKey

        init(name: String, bytes: [UInt8]) {
            self.name = name
            self.key = SymmetricKey(data: bytes)
            self.id = Array(SHA256.hash(data: Array("herald-kek\u{0}".utf8) + bytes).prefix(8))
        }

        /// ``id`` as the integer its bytes make in memory: what the keyring finds it by.
        var bits: UInt64 { id.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) } }
    }

    /// Where the keys come from.
    public enum Source: Sendable, CustomStringConvertible {
        case folder(String)
        case command(String)

        public var description: String {
            switch self {
            case .folder(let folder): folder
            case .command: "encryption-key-command"
            }
        }
    }

    public let source: Source
    /// How often a command's keys are read again, at most.
    public static let commandRefresh = Duration.seconds(300)
    private let state: Mutex<(current: Key, byID: [UInt64: Key])>
    private let lastLoad = Mutex(ContinuousClock.now)

    /// The keys of `folder`; a folder that does not exist or holds no key is given a first key
    /// (`k1`, current), made so that two processes starting at once agree on it.
    public init(folder: String) throws {
        self.source = .folder(folder)
        try Self.createIfEmpty(folder)
        state = Mutex(try Self.load(folder))
    }

    /// The keys `command` prints (run here, on a thread of NIO's blocking pool).
    public init(command: String) async throws {
        self.source = .command(command)
        state = Mutex(try Self.parse(try await Self.run(command)))
    }

    /// The key new data keys are wrapped with.
    public var current: Key { state.withLock { $0.current } }

    /// The key sealed data names, when this keyring holds it.
    public func key(id: [UInt8]) -> Key? {
        guard id.count == 8 else { return nil }
        return key(bits: id.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) })
    }

    /// The key whose 8-byte id is `bits` (as the bytes lie in memory): a sealed value's lookup
    /// without an array made and hashed byte by byte.
    func key(bits: UInt64) -> Key? { state.withLock { $0.byID[bits] } }

    /// Reads the folder again (a rotation made a new key current), on a thread of NIO's blocking
    /// pool; a command's keys at most every ``commandRefresh``.
    public func reload() async throws {
        let loaded: (current: Key, byID: [UInt64: Key])
        switch source {
        case .folder(let folder):
            loaded = try await NIOThreadPool.singleton.runIfActive { try Self.load(folder) }
        case .command(let command):
            guard lastLoad.withLock({ ContinuousClock.now - $0 >= Self.commandRefresh }) else { return }
            loaded = try Self.parse(try await Self.run(command))
            lastLoad.withLock { $0 = .now }
        }
        state.withLock { $0 = loaded }
    }

    // MARK: a command

    static let commandTimeout = Duration.seconds(30)
    static let maxCommandOutput = 64 * 1024

    /// `command`'s standard output, through `/bin/sh -c`, on a thread of NIO's blocking pool.
    /// Refused: a failing status, more than 64 KiB, or no end within 30 s (the command is killed).
    static func run(_ command: String) async throws -> String {
        try await NIOThreadPool.singleton.runIfActive {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", command]
            let output = Pipe()
            let errors = Pipe()
            process.standardOutput = output
            process.standardError = errors
            process.standardInput = FileHandle.nullDevice
            do {
                try process.run()
            } catch {
                throw ConfigError("encryption-key-command did not start: \(error)")
            }
            let killer = DispatchWorkItem { if process.isRunning { process.terminate() } }
            DispatchQueue.global().asyncAfter(
                deadline: .now() + .seconds(Int(commandTimeout.components.seconds)), execute: killer)
            defer { killer.cancel() }
            var text = Data()
            while let chunk = try output.fileHandleForReading.read(upToCount: 16 * 1024), !chunk.isEmpty {
                text += chunk
                if text.count > maxCommandOutput {
                    process.terminate()
                    break
                }
            }
            let errorText = (try? errors.fileHandleForReading.read(upToCount: 4096)) ?? Data()
            process.waitUntilExit()
            guard text.count <= maxCommandOutput else {
                throw ConfigError("encryption-key-command printed more than \(maxCommandOutput) bytes")
            }
            guard process.terminationReason == .exit, process.terminationStatus == 0 else {
                let first = String(decoding: errorText, as: UTF8.self).split(separator: "\n").first ?? ""
                let how =
                    process.terminationReason == .exit
                    ? "exited with status \(process.terminationStatus)"
                    : "was stopped (signal \(process.terminationStatus); over \(commandTimeout)?)"
                throw ConfigError("encryption-key-command \(how)\(first.isEmpty ? "" : ": \(first.prefix(200))")")
            }
            return String(decoding: text, as: UTF8.self)
        }
    }

    /// A command's keys: `<name> <base64 of 32 bytes>` a line, the current key first; blank lines
    /// and lines starting with `#` are skipped. The error never echoes a key.
    static func parse(_ text: String) throws -> (current: Key, byID: [UInt64: Key]) {
        var current: Key?
        var byID: [UInt64: Key] = [:]
        var names = Set<String>()
        for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" })
            if fields.isEmpty || fields[0].hasPrefix("#") { continue }
            guard fields.count == 2, isValidName(String(fields[0])),
                let bytes = Data(base64Encoded: String(fields[1])), bytes.count == keyBytes
            else {
                throw ConfigError(
                    "encryption-key-command's line \(number + 1) is not `<name> <32 bytes in base64>`")
            }
            let name = String(fields[0])
            guard names.insert(name).inserted else {
                throw ConfigError("encryption-key-command names key \(name) twice")
            }
            let key = Key(name: name, bytes: Array(bytes))
            byID[key.bits] = key
            if current == nil { current = key }
        }
        guard let current else { throw ConfigError("encryption-key-command printed no key") }
        return (current, byID)
    }

    /// The names of the keys the folder holds, current first.
    public var names: [String] {
        state.withLock { state in
            [state.current.name] + state.byID.values.map(\.name).filter { $0 != state.current.name }.sorted()
        }
    }

    // MARK: the folder

    static let keyBytes = 32

    /// A new random key's file text.
    static func newKeyText() -> String { Data(SecureRandom.bytes(keyBytes)).base64EncodedString() + "\n" }

    /// Adds key `name` (random) to `folder` and makes it current; the others stay. What `herald
    /// keys rotate` does. Refuses a name that is taken.
    public static func addCurrentKey(folder: String, name: String) throws {
        guard isValidName(name) else {
            throw ConfigError("a key's name is 1 to 64 characters of a-z A-Z 0-9 - _, not \(name.prefix(64))")
        }
        try createFolder(folder)
        guard try place(newKeyText(), at: "\(folder)/\(name).key") else {
            throw ConfigError("\(folder) already has a key named \(name)")
        }
        try replace(name + "\n", at: "\(folder)/current")
    }

    static func isValidName(_ name: String) -> Bool {
        (1...64).contains(name.utf8.count)
            && name.utf8.allSatisfy {
                ($0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "z"))
                    || ($0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z"))
                    || ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9")) || $0 == UInt8(ascii: "-")
                    || $0 == UInt8(ascii: "_")
            }
    }

    static func createFolder(_ folder: String) throws {
        try FileManager.default.createDirectory(
            atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    }

    static func createIfEmpty(_ folder: String) throws {
        func hasKeys() -> Bool {
            ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).contains { $0.hasSuffix(".key") }
        }
        guard !hasKeys() else { return }
        // Made whole in a folder of its own, then renamed into place (over an empty folder too):
        // of two processes starting at once, the first rename wins and the other reads its keys.
        let parent = (folder as NSString).deletingLastPathComponent
        try FileManager.default.createDirectory(
            atPath: parent.isEmpty ? "." : parent, withIntermediateDirectories: true)
        let staging = "\(folder).\(getpid()).\(UInt32.random(in: 0...UInt32.max)).new"
        // Beside the folder when its parent is writable; a volume mounted at the folder (a
        // container's read-only root around it) gets its keys in place.
        if (try? createFolder(staging)) != nil {
            defer { try? FileManager.default.removeItem(atPath: staging) }
            _ = try place(newKeyText(), at: "\(staging)/k1.key")
            _ = try place("k1\n", at: "\(staging)/current")
            if rename(staging, folder) == 0 || hasKeys() { return }
        }
        // The folder holds other files (a mount's lost+found) or is a mount point: the keys are
        // made in it, each file linked into place, so that two processes keep the first's.
        // `current` first: a process that sees a key file sees the `current` that names it.
        try createFolder(folder)
        _ = try place("k1\n", at: "\(folder)/current")
        _ = try place(newKeyText(), at: "\(folder)/k1.key")
    }

    /// Writes `text` to a new file beside `path` (mode 0600) and links it at `path`: false when
    /// `path` exists already (left as it is).
    static func place(_ text: String, at path: String) throws -> Bool {
        let temporary = temporaryPath(beside: path)
        try write(text, to: temporary)
        defer { unlink(temporary) }
        guard link(temporary, path) == 0 else {
            if errno == EEXIST { return false }
            throw ConfigError("cannot write \(path): \(String(cString: strerror(errno)))")
        }
        return true
    }

    /// Writes `text` to a new file beside `path` and renames it over `path`.
    static func replace(_ text: String, at path: String) throws {
        let temporary = temporaryPath(beside: path)
        try write(text, to: temporary)
        guard rename(temporary, path) == 0 else {
            unlink(temporary)
            throw ConfigError("cannot write \(path): \(String(cString: strerror(errno)))")
        }
    }

    /// A name beside `path` no other writer picks.
    static func temporaryPath(beside path: String) -> String {
        "\(path).\(getpid()).\(UInt32.random(in: 0...UInt32.max)).tmp"
    }

    static func write(_ text: String, to path: String) throws {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard descriptor >= 0 else { throw ConfigError("cannot write \(path): \(String(cString: strerror(errno)))") }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        do {
            try handle.write(contentsOf: Data(text.utf8))
            try handle.synchronize()
        } catch {
            throw ConfigError("cannot write \(path): \(error)")
        }
    }

    static func load(_ folder: String) throws -> (current: Key, byID: [UInt64: Key]) {
        var byName: [String: Key] = [:]
        for file in try FileManager.default.contentsOfDirectory(atPath: folder) where file.hasSuffix(".key") {
            let name = String(file.dropLast(4))
            guard isValidName(name) else { continue }
            guard let data = FileManager.default.contents(atPath: "\(folder)/\(file)"),
                data.count <= 1024,
                let bytes = Data(
                    base64Encoded: String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
                ),
                bytes.count == keyBytes
            else {
                throw ConfigError("\(folder)/\(file) is not a key: 32 bytes in base64")
            }
            byName[name] = Key(name: name, bytes: Array(bytes))
        }
        let currentName =
            FileManager.default.contents(atPath: "\(folder)/current").map {
                String(decoding: $0.prefix(128), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            } ?? ""
        guard let current = byName[currentName] else {
            throw ConfigError(
                "\(folder)/current names \(currentName.isEmpty ? "no key" : "key \(currentName)"), which the folder does not hold"
            )
        }
        var byID: [UInt64: Key] = [:]
        for key in byName.values { byID[key.bits] = key }
        return (current, byID)
    }
}

/// Envelope encryption of one kind of secret at rest (push credentials, secure and rich content):
/// each value is sealed with a data key (AES-256-GCM, a nonce of its own; see ``DataKeys``), and
/// that data key is wrapped by the keyring's current key-encryption key (AES-256-GCM), both stored
/// with the value:
///
///     "HSB1" | key id (8) | wrap nonce (12) | wrapped data key (32) | wrap tag (16) | nonce (12) | ciphertext | tag (16)
///
/// A rotation re-wraps the 68 bytes of the data key, never the value. `purpose` is authenticated
/// with both, so a value sealed for one use cannot be passed off as another. A value without the
/// leading `HSB1` was stored before encryption was turned on, and reads as it is.
public struct SecretBox: Sendable {
    public let keyring: Keyring
    public let purpose: String
    private let dataKeys = DataKeys()
    /// What each value's seal authenticates, and each data key's wrap (with the key's id).
    private let valueAAD: [UInt8]
    private let wrapAAD: [UInt8]

    public init(keyring: Keyring, purpose: String) {
        self.keyring = keyring
        self.purpose = purpose
        valueAAD = Array(purpose.utf8)
        wrapAAD = Array("\(purpose) data key".utf8)
    }

    /// The data keys in use. One data key seals many values (a new one after
    /// ``DataKeys/valuesPerKey`` values, an hour, or a change of current key; each value has a
    /// random nonce of its own, far below AES-GCM's bound for one key), and unwrapped ones are
    /// kept by their wrap (at most ``DataKeys/kept``): a read costs one AES-GCM open, not two. A
    /// re-wrap of a wrap is kept too, so values that shared a data key share it after a rotation.
    final class DataKeys: Sendable {
        static let valuesPerKey = 1 << 20
        static let lifetime = Duration.seconds(3600)
        static let kept = 256

        struct Current {
            var key: SymmetricKey
            /// Key id and wrap: the 68 bytes after the mark.
            var header: [UInt8]
            var uses: Int
            var madeAt: ContinuousClock.Instant
        }

        /// A wrap's key id and nonce (random per wrap), read in place: what the kept keys are
        /// found by, hashed as three integers rather than 68 bytes one by one (a read's hash of
        /// the header was a tenth of its cost). A hit is compared whole.
        struct WrapID: Hashable {
            var id: UInt64
            var nonceHead: UInt64
            var nonceTail: UInt32

            init(_ stored: [UInt8]) {
                (id, nonceHead, nonceTail) = stored.withUnsafeBytes {
                    (
                        $0.loadUnaligned(fromByteOffset: 4, as: UInt64.self),
                        $0.loadUnaligned(fromByteOffset: 12, as: UInt64.self),
                        $0.loadUnaligned(fromByteOffset: 20, as: UInt32.self)
                    )
                }
            }
        }

        struct State {
            var current: Current?
            var opened: [WrapID: (header: [UInt8], key: SymmetricKey)] = [:]
            var rewrapped: [[UInt8]: [UInt8]] = [:]
        }

        let state = Mutex(State())

        /// The data key to seal with under `kek`, and its header; `wrap` makes a new one's.
        func forSealing(kek: Keyring.Key, wrap: (SymmetricKey) throws -> [UInt8]) throws -> (SymmetricKey, [UInt8]) {
            try state.withLock { state in
                let now = ContinuousClock.now
                if var current = state.current, current.header.prefix(8).elementsEqual(kek.id),
                    current.uses < Self.valuesPerKey, now - current.madeAt < Self.lifetime
                {
                    current.uses += 1
                    state.current = current
                    return (current.key, current.header)
                }
                let key = SymmetricKey(size: .bits256)
                let header = kek.id + (try wrap(key))
                state.current = Current(key: key, header: header, uses: 1, madeAt: now)
                return (key, header)
            }
        }

        /// The kept data key of the sealed value `stored` (its header at bytes 4..<72), if any.
        func opened(_ stored: [UInt8]) -> SymmetricKey? {
            let id = WrapID(stored)
            guard let kept = state.withLock({ $0.opened[id] }) else { return nil }
            let same = kept.header.withUnsafeBytes { header in
                stored.withUnsafeBytes { all in
                    guard let kept = header.baseAddress, let value = all.baseAddress,
                        all.count >= SecretBox.headerBytes,
                        header.count == SecretBox.headerBytes - 4
                    else { return false }
                    return memcmp(kept, value + 4, SecretBox.headerBytes - 4) == 0
                }
            }
            return same ? kept.key : nil
        }

        func keep(_ key: SymmetricKey, for stored: [UInt8]) {
            let entry = (header: Array(stored[4..<SecretBox.headerBytes]), key: key)
            state.withLock { state in
                if state.opened.count >= Self.kept { state.opened.removeAll(keepingCapacity: true) }
                state.opened[WrapID(stored)] = entry
            }
        }

        func rewrapped(_ header: [UInt8]) -> [UInt8]? { state.withLock { $0.rewrapped[header] } }

        func keepRewrap(_ new: [UInt8], for old: [UInt8]) {
            state.withLock { state in
                if state.rewrapped.count >= Self.kept { state.rewrapped.removeAll(keepingCapacity: true) }
                state.rewrapped[old] = new
            }
        }
    }

    static let magic = Array("HSB1".utf8)
    static let headerBytes = 4 + 8 + 12 + 32 + 16
    static let overhead = headerBytes + 12 + 16

    public func seal(_ plaintext: [UInt8]) throws -> [UInt8] {
        let kek = keyring.current
        let (dataKey, header) = try dataKeys.forSealing(kek: kek) { try wrap($0, with: kek) }
        let sealed = try AES.GCM.seal(plaintext, using: dataKey, authenticating: valueAAD)
        var out: [UInt8] = []
        out.reserveCapacity(Self.overhead + plaintext.count)
        out += Self.magic
        out += header
        out += sealed.nonce
        out += sealed.ciphertext
        out += sealed.tag
        return out
    }

    /// The value `stored` holds; one stored before encryption as it is. A value sealed under a key
    /// this keyring does not hold (yet: another replica rotated, and this one reloads within
    /// seconds) is UNAVAILABLE; one that does not open (altered, or another purpose's) INTERNAL.
    public func open(_ stored: [UInt8]) throws -> [UInt8] {
        guard Self.isSealed(stored) else { return stored }
        let dataKey = try unwrap(stored)
        do {
            // nonce | ciphertext | tag: swift-crypto's combined form, taken in one copy.
            let box = try AES.GCM.SealedBox(combined: stored[Self.headerBytes...])
            return Array(try AES.GCM.open(box, using: dataKey, authenticating: valueAAD))
        } catch {
            throw ServiceError(.internal, "a stored \(purpose) does not open: altered, or not sealed for it")
        }
    }

    /// `stored` with its data key wrapped by the current key, or sealed when it was stored before
    /// encryption; nil when it is sealed under the current key already.
    public func rewrap(_ stored: [UInt8]) throws -> [UInt8]? {
        guard Self.isSealed(stored) else { return try seal(stored) }
        let kek = keyring.current
        guard Array(stored[4..<12]) != kek.id else { return nil }
        let old = Array(stored[4..<Self.headerBytes])
        var new = dataKeys.rewrapped(old) ?? []
        if !new.prefix(8).elementsEqual(kek.id) || new.isEmpty {
            new = kek.id + (try wrap(try unwrap(stored), with: kek))
            dataKeys.keepRewrap(new, for: old)
        }
        return Self.magic + new + stored[Self.headerBytes...]
    }

    /// Whether `stored` is sealed under the current key.
    public func isCurrent(_ stored: [UInt8]) -> Bool {
        Self.isSealed(stored) && isCurrent(head: stored)
    }

    /// ``isCurrent(_:)`` from a value's first 12 bytes alone (its mark and key id): what a scan
    /// for values to re-wrap reads of each.
    public func isCurrent(head: [UInt8]) -> Bool {
        head.count >= 12 && head.prefix(4).elementsEqual(Self.magic) && Array(head[4..<12]) == keyring.current.id
    }

    static func isSealed(_ stored: [UInt8]) -> Bool {
        stored.count >= overhead && stored.prefix(4).elementsEqual(magic)
    }

    private func wrap(_ dataKey: SymmetricKey, with kek: Keyring.Key) throws -> [UInt8] {
        let raw = dataKey.withUnsafeBytes { Array($0) }
        let box = try AES.GCM.seal(raw, using: kek.key, authenticating: wrapAAD + kek.id)
        return Array(box.nonce) + box.ciphertext + box.tag
    }

    private func unwrap(_ stored: [UInt8]) throws -> SymmetricKey {
        // The keyring is asked first, so a kept data key never outlives its key-encryption key.
        guard
            let kek = keyring.key(bits: stored.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 4, as: UInt64.self) })
        else {
            throw ServiceError(
                .unavailable,
                "a stored \(purpose) is sealed under a key-encryption key \(keyring.source) does not hold (yet)")
        }
        if let key = dataKeys.opened(stored) { return key }
        let key = try unwrap(stored, with: kek, id: Array(stored[4..<12]))
        dataKeys.keep(key, for: stored)
        return key
    }

    private func unwrap(_ stored: [UInt8], with kek: Keyring.Key, id: [UInt8]) throws -> SymmetricKey {
        do {
            let box = try AES.GCM.SealedBox(
                nonce: AES.GCM.Nonce(data: stored[12..<24]), ciphertext: stored[24..<56], tag: stored[56..<72])
            let raw = try AES.GCM.open(box, using: kek.key, authenticating: wrapAAD + id)
            return SymmetricKey(data: raw)
        } catch {
            throw ServiceError(.internal, "a stored \(purpose)'s data key does not open under key \(kek.name)")
        }
    }
}

extension ProcessContext {
    /// The box that seals this service's `purpose` at rest, from `encryption-keys`; nil (with a
    /// warning) when it is off.
    public func secretBox(purpose: String) async throws -> SecretBox? {
        let keyring: Keyring
        if let command = config.encryptionKeyCommand {
            keyring = try await Keyring(command: command)
        } else if let folder = config.encryptionKeys {
            keyring = try Keyring(folder: folder)
        } else {
            logger.warning(
                "\(purpose) is stored unencrypted: set encryption-keys (a folder of key-encryption keys) or encryption-key-command",
                metadata: ["herald.setting": "encryption-keys"])
            return nil
        }
        logger.info(
            "\(purpose) sealed at rest",
            metadata: ["herald.keys": "\(keyring.source)", "herald.current_key": "\(keyring.current.name)"])
        return SecretBox(keyring: keyring, purpose: purpose)
    }
}

extension SecretBox {
    /// Keeps what `rewrapAll` seals under the keyring's current key: every `interval` it reads the
    /// keyring's folder again, and once at start and after each change of current key (`herald
    /// keys rotate`) it runs `rewrapAll` until a pass finds nothing left to re-wrap. Reads go on
    /// throughout: the keys a rotation replaced stay readable until their files are removed.
    public func keeper(
        every interval: Duration = .seconds(10), logger: Logger, rewrapAll: @escaping @Sendable () async throws -> Int
    ) -> Periodic {
        /// The key under which a whole pass last found nothing to re-wrap.
        final class Done: Sendable { let key = Mutex<[UInt8]?>(nil) }
        let done = Done()
        let keyring = self.keyring
        let purpose = self.purpose
        return Periodic("\(purpose) key keeper", every: interval, logger: logger) {
            try await keyring.reload()
            let current = keyring.current
            guard done.key.withLock({ $0 }) != current.id else { return }
            let count = try await rewrapAll()
            if count > 0 {
                logger.notice(
                    "re-sealed \(purpose) under the current key",
                    metadata: ["herald.count": "\(count)", "herald.current_key": "\(current.name)"])
            }
            // Done for this key once a pass finds nothing to change (a row written meanwhile under
            // an older key is taken by the next pass).
            if count == 0 { done.key.withLock { $0 = current.id } }
        }
    }
}
