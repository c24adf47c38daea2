import Crypto
import Foundation
import GRDB
import HeraldModel
import HeraldService
import HeraldTestSupport
import StackTestSupport
import Testing

/// Secrets at rest: a hub's push credentials (herald-dispatch) and secure and rich content
/// (herald-payload) are sealed in their databases, so no database file, its write-ahead log or a
/// `herald backup` holds a private key or a secure payload in the clear.
@Suite("secrets at rest", .serialized, .timeLimit(.minutes(3)), .watchedForStalls)
struct SecretsAtRestTests {
    /// Every regular file under `folder` but the keyrings (`*.keys`), with its bytes.
    static func files(under folder: String) throws -> [(String, Data)] {
        var found: [(String, Data)] = []
        let enumerator = FileManager.default.enumerator(atPath: folder)
        while let path = enumerator?.nextObject() as? String {
            guard !path.split(separator: "/").contains(where: { $0.hasSuffix(".keys") }) else { continue }
            var isDirectory: ObjCBool = false
            let full = "\(folder)/\(path)"
            guard FileManager.default.fileExists(atPath: full, isDirectory: &isDirectory), !isDirectory.boolValue,
                let data = FileManager.default.contents(atPath: full)
            else { continue }
            found.append((path, data))
        }
        return found
    }

    @Test(
        "no database file, WAL or backup holds a PEM marker, a hub's private key or a secure payload; all still read back",
        arguments: ["a keyring folder", "a key command"]
    )
    func nothingInTheClear(source: String) async throws {
        // The command's keyring: a file outside the stack's folders, as a KMS's answer would be.
        let keyring = FileManager.default.temporaryDirectory.appendingPathComponent(
            "herald-keyring-\(UUID().uuidString)"
        )
        .path
        defer { try? FileManager.default.removeItem(atPath: keyring) }
        let key = Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
        try "kms1 \(key)\n".write(toFile: keyring, atomically: true, encoding: .utf8)
        let command = source == "a key command"
        try await LiveStack.with(
            auth: .accounts, users: ["admin", "bob"], database: .sqlite,
            configure: { configuration in
                guard command else { return }
                for service in ["dispatch", "payload"] {
                    configuration.extraArguments[service, default: []] += [
                        "--encryption-key-command", "cat '\(keyring)'",
                    ]
                }
            }
        ) { live in
            #expect(try await live.herald(["hubs", "grant", "default", "admin", "Manage"]).status == 0)
            let edge = live.edge
            #expect(try await edge.request("POST", "/v1/hubs", as: "admin", body: #"{"name":"web"}"#).status == 201)
            let vapid = P256.Signing.PrivateKey()
            let pem = vapid.pemRepresentation
            let body = try JSONSerialization.data(withJSONObject: [
                "vapidKey": pem, "subject": "mailto:ops@example.com",
            ])
            let set = try await edge.request(
                "PUT", "/v1/hubs/web/credentials/browser", as: "admin", body: String(decoding: body, as: UTF8.self))
            try #require(set.status == 200, "\(set.text)")
            // The key's base64 body, and its raw scalar, as they would sit in a file in the clear.
            let keyBody = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
            let scalar = vapid.rawRepresentation
            let secret = "a known secure payload \(UUID().uuidString)"
            let sent = try await edge.request(
                "POST", "/v1/notifications?kind=secure&to_user=bob", as: "admin", body: secret)
            try #require(sent.status == 202, "\(sent.text)")
            let payloadID = try #require(try sent.json()["payloadId"] as? Int)
            // Read back whole, by its recipient.
            let fetched = try await edge.request("GET", "/api/notifications/\(payloadID)", as: "bob")
            #expect(try fetched.json()["Payload"] as? String == secret, "\(fetched.text)")

            let backup = live.configuration.directory + "/backup"
            let made = try await live.herald(["backup", "--data-dir", live.configuration.dataDirectory, backup])
            try #require(made.status == 0, "\(made)")
            let files = try Self.files(under: live.configuration.dataDirectory) + Self.files(under: backup)
            #expect(
                files.contains { $0.0.hasSuffix("dispatch.sqlite") }
                    && files.contains { $0.0.hasSuffix("payload.sqlite") })
            #expect(files.contains { $0.0.hasSuffix("-wal") }, "the write-ahead logs are read too: \(files.map(\.0))")
            for (path, data) in files {
                for needle in ["-----BEGIN", keyBody, secret] {
                    #expect(data.range(of: Data(needle.utf8)) == nil, "\(path) holds \(needle.prefix(24))…")
                }
                #expect(data.range(of: scalar) == nil, "\(path) holds the private key's scalar")
            }
            // The keys sit beside the data, never in the backup; a command's nowhere in the stack's folders.
            #expect(
                FileManager.default.fileExists(atPath: live.configuration.dataDirectory + "/payload.keys/current")
                    != command)
            if command {
                for (path, data) in files { #expect(data.range(of: Data(key.utf8)) == nil, "\(path) holds the key") }
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: backup).allSatisfy { !$0.hasSuffix(".keys") })
        }
    }

    @Test("herald keys rotate while the stack serves: every answer succeeds, and every sealed row moves to the new key")
    func rotateOnline() async throws {
        try await LiveStack.with(auth: .accounts, users: ["admin", "bob"], database: .sqlite) { live in
            #expect(try await live.herald(["hubs", "grant", "default", "admin", "Manage"]).status == 0)
            let edge = live.edge
            #expect(try await edge.request("POST", "/v1/hubs", as: "admin", body: #"{"name":"web"}"#).status == 201)
            let body = try JSONSerialization.data(withJSONObject: [
                "vapidKey": P256.Signing.PrivateKey().pemRepresentation, "subject": "mailto:ops@example.com",
            ])
            let set = try await edge.request(
                "PUT", "/v1/hubs/web/credentials/browser", as: "admin", body: String(decoding: body, as: UTF8.self))
            try #require(set.status == 200, "\(set.text)")
            var ids: [Int] = []
            func send(_ text: String) async throws {
                let sent = try await edge.request(
                    "POST", "/v1/notifications?kind=secure&to_user=bob", as: "admin", body: text)
                #expect(sent.status == 202, "\(sent.text)")
                if let id = try? sent.json()["payloadId"] as? Int { ids.append(id) }
            }
            for n in 0..<5 { try await send("before \(n)") }
            let rotated = try await live.herald(["keys", "rotate", "--data-dir", live.configuration.dataDirectory])
            try #require(rotated.status == 0, "\(rotated)")
            #expect(
                rotated.output.contains("payload.keys") && rotated.output.contains("dispatch.keys"), "\(rotated.output)"
            )
            let data = live.configuration.dataDirectory
            let payloadKey = try Keyring(folder: data + "/payload.keys").current
            let dispatchKey = try Keyring(folder: data + "/dispatch.keys").current
            #expect(payloadKey.name != "k1" && dispatchKey.name != "k1")
            // Sends and reads go on while the services re-seal; each answer is a success.
            var sealed = false
            var round = 0
            let deadline = ContinuousClock.now + .seconds(60)
            while !sealed, ContinuousClock.now < deadline {
                try await send("during \(round)")
                round += 1
                for id in ids {
                    let read = try await edge.request("GET", "/api/notifications/\(id)", as: "bob")
                    #expect(read.status == 200, "\(id): \(read.status) \(read.text)")
                }
                sealed =
                    try Self.keyIDs(data + "/payload.sqlite", "SELECT content FROM payload").allSatisfy {
                        $0 == payloadKey.id
                    }
                    && (try Self.keyIDs(data + "/dispatch.sqlite", "SELECT credentials FROM hub_credential"))
                        .allSatisfy { $0 == dispatchKey.id }
                try await Task.sleep(for: .milliseconds(200))
            }
            #expect(sealed, "rows still sealed under the old keys after 60 s")
            // Still readable as the service holds them: the credentials, and the hub's status.
            let credentials = try await edge.request("GET", "/v1/hubs/web/credentials", as: "admin")
            #expect(credentials.status == 200 && credentials.text.contains(#""source":"hub""#), "\(credentials.text)")
        }
    }

    /// The key id (bytes 4..<12 of a sealed value) of each row `query` reads from the SQLite file
    /// at `path`, read beside the service (WAL readers do not wait for its writer).
    static func keyIDs(_ path: String, _ query: String) throws -> [[UInt8]] {
        var configuration = Configuration()
        configuration.readonly = true
        let database = try DatabaseQueue(path: path, configuration: configuration)
        return try database.read { db in
            try Data.fetchAll(db, sql: query).map { Array($0.dropFirst(4).prefix(8)) }
        }
    }
}
