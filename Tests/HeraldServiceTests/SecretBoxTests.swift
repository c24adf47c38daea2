import Foundation
import HeraldModel
import HeraldService
import HeraldTestSupport
import Testing

@Suite("secrets at rest", .watchedForStalls)
struct SecretBoxTests {
    /// A new folder under the temporary directory, removed after `body`.
    static func withFolder(_ body: (String) async throws -> Void) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("herald-keys-\(UUID().uuidString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try await body(folder)
    }

    @Test(
        "an empty folder gets a first key (mode 0600, folder 0700); a value seals and opens, and reads nothing of itself"
    )
    func sealOpen() async throws {
        try await Self.withFolder { folder in
            let box = SecretBox(keyring: try Keyring(folder: folder), purpose: "test secrets")
            #expect(box.keyring.current.name == "k1")
            let attributes = try FileManager.default.attributesOfItem(atPath: "\(folder)/k1.key")
            #expect((attributes[.posixPermissions] as? Int) == 0o600)
            let folderAttributes = try FileManager.default.attributesOfItem(atPath: folder)
            #expect((folderAttributes[.posixPermissions] as? Int) == 0o700)
            let secret = Array("-----BEGIN PRIVATE KEY----- a secure payload".utf8)
            let sealed = try box.seal(secret)
            #expect(try box.open(sealed) == secret)
            #expect(!String(decoding: sealed, as: UTF8.self).contains("BEGIN"))
            let again = try box.seal(secret)
            #expect(again != sealed, "each value has a nonce of its own")
            #expect(again[4..<72] == sealed[4..<72], "values sealed one after another share a data key")
            #expect(try box.open([]) == [])
            #expect(try box.open(try box.seal([])) == [])
            // Stored before encryption: read as it is, sealed by a re-wrap.
            #expect(try box.open(secret) == secret)
            let resealed = try #require(try box.rewrap(secret))
            #expect(try box.open(resealed) == secret)
            #expect(box.isCurrent(resealed))
            #expect(try box.rewrap(resealed) == nil)
        }
    }

    @Test("an altered byte, another purpose or another keyring's value does not open: an error, never a trap")
    func tampering() async throws {
        try await Self.withFolder { folder in
            let box = SecretBox(keyring: try Keyring(folder: folder), purpose: "test secrets")
            let sealed = try box.seal(Array("payload".utf8))
            for index in [4, 12, 30, 60, 72, sealed.count - 1] {
                var altered = sealed
                altered[index] ^= 0x01
                #expect(throws: ServiceError.self, "byte \(index)") { try box.open(altered) }
            }
            let other = SecretBox(keyring: box.keyring, purpose: "other secrets")
            #expect(throws: ServiceError.self) { try other.open(sealed) }
            try await Self.withFolder { otherFolder in
                let stranger = SecretBox(keyring: try Keyring(folder: otherFolder), purpose: "test secrets")
                #expect(throws: ServiceError.self) { try stranger.open(sealed) }
            }
        }
    }

    @Test("a rotation makes a new key current; values under the old key still open and re-wrap without their value")
    func rotation() async throws {
        try await Self.withFolder { folder in
            let box = SecretBox(keyring: try Keyring(folder: folder), purpose: "test secrets")
            let secret = Array(repeating: UInt8(7), count: 1000)
            let sealed = try box.seal(secret)
            let sibling = try box.seal([1, 2, 3])
            try Keyring.addCurrentKey(folder: folder, name: "k2")
            #expect(box.keyring.current.name == "k1", "read again only by reload()")
            try await box.keyring.reload()
            #expect(box.keyring.current.name == "k2" && box.keyring.names == ["k2", "k1"])
            #expect(!box.isCurrent(sealed))
            #expect(try box.open(sealed) == secret)
            let rewrapped = try #require(try box.rewrap(sealed))
            #expect(box.isCurrent(rewrapped))
            #expect(try box.open(rewrapped) == secret)
            #expect(
                rewrapped.suffix(secret.count + 28) == sealed.suffix(secret.count + 28),
                "only the data key's wrap changed")
            let siblingRewrapped = try #require(try box.rewrap(sibling))
            #expect(siblingRewrapped[4..<72] == rewrapped[4..<72], "values that shared a data key share its new wrap")
            #expect(try box.open(siblingRewrapped) == [1, 2, 3])
            #expect(throws: ConfigError.self) { try Keyring.addCurrentKey(folder: folder, name: "k2") }
            #expect(throws: ConfigError.self) { try Keyring.addCurrentKey(folder: folder, name: "../x") }
            // The old key gone: what it alone wraps is unavailable, not a crash.
            try FileManager.default.removeItem(atPath: "\(folder)/k1.key")
            try await box.keyring.reload()
            #expect(throws: ServiceError.self) { try box.open(sealed) }
            #expect(try box.open(rewrapped) == secret)
        }
    }

    @Test("a folder whose current names no key, or with a key that is not 32 bytes, is a configuration error")
    func badFolders() async throws {
        try await Self.withFolder { folder in
            _ = try Keyring(folder: folder)
            try "k9\n".write(toFile: "\(folder)/current", atomically: true, encoding: .utf8)
            #expect(throws: ConfigError.self) { try Keyring(folder: folder) }
            try "k1\n".write(toFile: "\(folder)/current", atomically: true, encoding: .utf8)
            try "c2hvcnQ=\n".write(toFile: "\(folder)/k3.key", atomically: true, encoding: .utf8)
            #expect(throws: ConfigError.self) { try Keyring(folder: folder) }
        }
    }

    @Test("a command's keys: the first line current, the others readable; a rotation is a new first line, read again")
    func commandKeys() async throws {
        try await Self.withFolder { folder in
            let k1 = Data((0..<32).map { UInt8($0) }).base64EncodedString()
            let k2 = Data((0..<32).map { UInt8(255 - $0) }).base64EncodedString()
            let file = "\(folder).keyring"
            defer { try? FileManager.default.removeItem(atPath: file) }
            try "# the keyring\nk1 \(k1)\n".write(toFile: file, atomically: true, encoding: .utf8)
            let box = SecretBox(keyring: try await Keyring(command: "cat '\(file)'"), purpose: "test secrets")
            #expect(box.keyring.current.name == "k1" && box.keyring.names == ["k1"])
            let sealed = try box.seal(Array("payload".utf8))
            try "k2 \(k2)\n\nk1 \(k1)\n".write(toFile: file, atomically: true, encoding: .utf8)
            let rotated = try await Keyring(command: "cat '\(file)'")
            #expect(rotated.current.name == "k2" && rotated.names == ["k2", "k1"])
            let other = SecretBox(keyring: rotated, purpose: "test secrets")
            #expect(try other.open(sealed) == Array("payload".utf8))
            #expect(try other.open(try #require(try other.rewrap(sealed))) == Array("payload".utf8))
            // Read again at most every commandRefresh: a reload now keeps what it has.
            try await box.keyring.reload()
            #expect(box.keyring.current.name == "k1")
        }
    }

    @Test("a command that fails, prints no key, a short key, a name twice or too much is refused")
    func badCommands() async throws {
        let key = Data(count: 32).base64EncodedString()
        for (command, words) in [
            ("echo nope >&2; exit 3", "exited with status 3: nope"), ("true", "printed no key"),
            ("echo 'k1 c2hvcnQ='", "line 1 is not"), ("echo 'k1 \(key)'; echo 'k1 \(key)'", "names key k1 twice"),
            ("echo '../k \(key)'", "line 1 is not"), ("head -c 70000 /dev/zero", "more than 65536 bytes"),
            ("/nonexistent/kms", "exited with status 127"),
        ] {
            do {
                _ = try await Keyring(command: command)
                Issue.record("\(command) was taken")
            } catch let error as ConfigError {
                #expect("\(error)".contains(words), "\(command): \(error)")
                #expect(!"\(error)".contains(key) || key.isEmpty, "an error never echoes a key")
            }
        }
    }

    @Test("two processes making the first key at once agree on it")
    func firstKeyRace() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("herald-keys-\(UUID().uuidString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let ids = try await withThrowingTaskGroup(of: [UInt8].self) { group in
            for _ in 0..<8 { group.addTask { try Keyring(folder: folder).current.id } }
            return try await group.reduce(into: Set<[UInt8]>()) { $0.insert($1) }
        }
        #expect(ids.count == 1)
    }
}
