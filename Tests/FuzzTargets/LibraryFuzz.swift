// The fuzz targets over the libraries Herald hands outside bytes to, each at the entry point
// Herald calls (docs/security.md, "Libraries that read outside input", lists them):
//
//   http1        the edge's HTTP/1 handlers as EdgeHTTP1Channel builds them (NIO's llhttp parser,
//                ConnectionPersistence, NIOHTTPTypes' HTTP/1-to-HTTPTypes codec) fed a client's
//                bytes; every request head that comes out is read as the routes read it
//                (Hummingbird's URI path and query, TrustedProxies over its forwarding headers)
//   http2        a push connection's handlers as HTTP2Pool builds them (NIO's HTTP/2 client, HPACK,
//                Herald's HTTP2Connection) fed what a push service, or anyone on the path, sends
//   credentials  a hub's push credentials as herald-dispatch checks them when they are set: the
//                first byte picks the entry point (jwt-kit's ES256 PEM for APNs .p8 keys, swift-crypto
//                and jwt-kit for VAPID keys, NIOSSL's PKCS#12 and PEM with swift-certificates' X.509
//                for APNs certificates, Foundation's JSON and jwt-kit's RSA PEM for FCM service
//                accounts, and the settings table itself)
//
// The property of each: nothing traps. (Multipart bodies are Herald's own parser, run by `batch`
// and `router`; JSON bodies by `json`, `installation` and `router`.)
import DispatchService
import Edge
import Foundation
import HTTPTypes
import HeraldModel
import HeraldProto
import Hummingbird
import HummingbirdCore
import JWTKit
import NIOCore
import NIOEmbedded
import NIOHTTPTypes
import PushProviders

extension FuzzTarget {
    /// Proxies trusting every address, one per header: every forwarding header is walked.
    static let everyProxy: [TrustedProxies] = TrustedProxies.Header.allCases.compactMap {
        try? TrustedProxies("0.0.0.0/0, ::/0", header: $0)
    }

    /// `bytes` written into a connected EmbeddedChannel with `configure`'s handlers; `read` then
    /// sees what came out. Afterwards the channel is finished and its loop shut down: the
    /// handlers' timers (an HTTP/2 connection's ping, its settings ack's deadline) hold them until
    /// they run or are cancelled, and an embedded loop's time never moves to run them.
    static func fedEmbedded(
        _ what: String, _ bytes: [UInt8], configure: (EmbeddedChannel) throws -> Void,
        read: (EmbeddedChannel) -> Void = { _ in }
    ) {
        let channel = EmbeddedChannel()
        defer {
            _ = try? channel.finish()
            try? channel.embeddedEventLoop.syncShutdownGracefully()
        }
        do {
            try configure(channel)
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        } catch {
            fatalError("fuzz harness: cannot set up the \(what) handlers: \(error)")
        }
        // An error is the protocol's answer (a 400, a closed connection), not a finding.
        _ = try? channel.writeInbound(ByteBuffer(bytes: bytes))
        read(channel)
    }

    static func http1(_ bytes: [UInt8]) {
        fedEmbedded("HTTP/1", bytes, configure: { try EdgeHTTP1Pipeline.configureForFuzzing($0) }) { channel in
            while let part = try? channel.readInbound(as: HTTPRequestPart.self) {
                guard case .head(let head) = part else { continue }
                let uri = URI(head.path ?? "")
                _ = uri.path.utf8.count
                for (name, value) in uri.queryParameters { _ = name.utf8.count + value.utf8.count }
                for proxies in everyProxy { _ = proxies.client(peer: "10.0.0.1", headers: head.headerFields) }
                _ = head.headerFields[.contentType].map { Multipart.boundary(contentType: $0) }
            }
        }
    }

    static func http2(_ bytes: [UInt8]) {
        fedEmbedded("HTTP/2", bytes, configure: { try HTTP2Pool.configureForFuzzing($0) })
    }

    /// The entry points of ``credentials(_:)``, chosen by the input's first byte.
    enum CredentialsEntry: UInt8, CaseIterable {
        case apnsKey, vapidKey, apnsCertificate, fcmAccount, settings
    }

    static func credentials(_ bytes: [UInt8]) {
        guard let first = bytes.first else { return }
        let entry = CredentialsEntry.allCases[Int(first) % CredentialsEntry.allCases.count]
        let rest = Array(bytes.dropFirst())
        let text = String(decoding: rest, as: UTF8.self)
        switch entry {
        case .apnsKey:
            blocking { _ = try? await APNsProviderToken(keyPEM: text, keyID: "KEYID12345", teamID: "TEAMID1234") }
        case .vapidKey:
            blocking { _ = try? await VAPID(keyPEM: text, subject: "mailto:ops@example.com") }
        case .apnsCertificate:
            // The file, NUL, its password.
            let split = rest.split(separator: 0, maxSplits: 1, omittingEmptySubsequences: false)
            let password = split.count > 1 ? String(decoding: split[1], as: UTF8.self) : ""
            _ = try? APNsCertificate(file: Array(split.first ?? []), password: password)
        case .fcmAccount:
            guard let account = try? FCMServiceAccount(json: rest) else { return }
            _ = try? Insecure.RSA.PrivateKey(pem: account.privateKey)
        case .settings:
            // A platform byte, then NAME=VALUE pairs separated by NUL.
            guard let platformByte = rest.first else { return }
            let platforms: [Platform] = [.apns, .fcm, .wns, .browser]
            var settings: [String: String] = [:]
            for pair in rest.dropFirst().split(separator: 0) {
                let parts = pair.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
                settings[String(decoding: parts[0], as: UTF8.self)] =
                    parts.count > 1 ? String(decoding: parts[1], as: UTF8.self) : ""
            }
            _ = try? PlatformCredentials.parse(
                platform: platforms[Int(platformByte) % platforms.count], settings: settings)
        }
    }
}
