import ArgumentParser
import Crypto
import Foundation
import NIOPosix
import ProviderDoubles
import Synchronization

/// `herald-bench apns-double`: APNs on loopback (and FCM HTTP v1 with `--fcm-project`), in a
/// process of its own so that its CPU is not Herald's, for `fanout --provider apns|fcm`.
///
/// The server is the tests' (ProviderDoubles' `PushDouble`: HTTP/2 over TLS, frames handled on the
/// connection, 1,000 concurrent streams as APNs advertises; about 14 µs of CPU a request on one
/// event-loop thread), recording nothing. What it answers holds every request to the APNs rules the
/// tests' double answers by (`APNsRules`) that cost nothing per request: the provider token's ES256
/// signature, `kid`, `iss` and age are checked once per connection (and again whenever a
/// connection's token changes, as APNs caches a verified token), then the device token's form (64
/// hex digits), `apns-topic`, `apns-push-type`, `apns-priority`, `apns-id` and the payload's size on
/// every request (not the payload's JSON); it answers 200 with the `apns-id`, or APNs' status and
/// reason. For FCM it hands out an access token at `/token` (counted as a token check) and accepts
/// sends to the project that carry it.
struct APNsDoubleCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apns-double", abstract: "Serve an APNs double on loopback (HTTP/2, TLS).", shouldDisplay: false)

    @Option var certificate: String
    @Option var key: String
    @Option(help: "The provider key's public half (PEM).") var jwtPublicKey: String
    @Option var keyID: String
    @Option var teamID: String
    @Option var topic: String
    @Option(help: "Written once listening: the double's URL.") var urlFile: String
    @Option(help: "Rewritten every 50 ms: requests answered 200, refused, token checks, connections.") var statsFile:
        String
    @Option var threads = 1
    @Option(help: "Also serve FCM HTTP v1 for this project (and its OAuth token endpoint, /token).") var fcmProject:
        String?
    @Option(help: "A device token whose pushes' arrival times (apns-id and Unix ms) go to --watch-file.")
    var watchDevice: String?
    @Option var watchFile: String?

    func run() async throws { try await execute() }

    func execute() async throws {
        let rules = APNsDoubleRules(
            provider: APNsRules.Provider(
                key: try P256.Signing.PublicKey(
                    pemRepresentation: String(contentsOfFile: jwtPublicKey, encoding: .utf8)),
                keyID: keyID, teamID: teamID, topic: topic),
            fcmPath: fcmProject.map { "/v1/projects/\($0)/messages:send" })
        let counters = APNsDoubleCounters(watch: watchDevice)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: threads)
        let double = try await PushDouble.start(
            .tls(certificate: certificate, key: key), record: false, eventLoopGroup: group
        ) { request in
            rules.answer(request, counters: counters)
        }
        try "https://127.0.0.1:\(double.port)".write(toFile: urlFile, atomically: true, encoding: .utf8)
        while true {
            let line =
                "\(counters.delivered.load(ordering: .relaxed)) \(counters.refused.load(ordering: .relaxed)) "
                + "\(counters.verifications.load(ordering: .relaxed)) \(double.connections)\n"
            try? line.write(toFile: statsFile, atomically: true, encoding: .utf8)
            if let watchFile {
                let lines = counters.watched.withLock { $0 }
                try? lines.map { $0 + "\n" }.joined().write(toFile: watchFile, atomically: true, encoding: .utf8)
            }
            try await Task.sleep(for: .milliseconds(50))
        }
    }
}

/// What the double's stats file says.
struct APNsDoubleStats {
    var delivered = 0
    var refused = 0
    var verifications = 0
    var connections = 0

    static func read(_ path: String) -> APNsDoubleStats? {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
        let fields = text.split(whereSeparator: \.isWhitespace).compactMap { Int($0) }
        guard fields.count == 4 else { return nil }
        return APNsDoubleStats(
            delivered: fields[0], refused: fields[1], verifications: fields[2], connections: fields[3])
    }
}

final class APNsDoubleCounters: Sendable {
    let delivered = Atomic(0)
    let refused = Atomic(0)
    let verifications = Atomic(0)
    /// The provider token each connection last verified (APNs checks a token once per connection).
    let verified = Mutex<[Int: String]>([:])
    /// FCM sends accepted, for the message names.
    let sent = Atomic(0)
    /// The watched device's pushes: "apns-id unix-ms" per line, as they arrived.
    let watched = Mutex<[String]>([])
    let watch: String?

    init(watch: String? = nil) { self.watch = watch }
}

/// What the double holds requests to: APNs' rules (ProviderDoubles' ``APNsRules``, which the tests'
/// double answers by too) for one provider, and FCM's access token when FCM is served.
struct APNsDoubleRules: Sendable {
    var provider: APNsRules.Provider
    /// FCM's send path, when FCM is served too.
    var fcmPath: String?
    /// The access token the double's `/token` hands out, and FCM sends must carry.
    static let fcmAccessToken = "bench-fcm-access-token"

    /// nil when the token is good; otherwise APNs' refusal. Its claims are checked with its
    /// signature, once per token a connection sends.
    func check(jwt: String) -> APNsRules.Refusal? {
        switch APNsRules.verify(providerToken: jwt, key: provider.key) {
        case .failure(let refusal): return refusal
        case .success(let token):
            return APNsRules.check(token, for: provider, now: Date().timeIntervalSince1970)
        }
    }

    /// The answer to one request: an FCM token or send when FCM is served, else an APNs push, held
    /// to APNs' rules in their order; a push is counted delivered (200) or refused.
    func answer(_ request: PushDouble.Request, counters: APNsDoubleCounters) -> PushDouble.Reply {
        var authorization = ""
        var topic = ""
        var type = ""
        var apnsID = ""
        var priority = ""
        for (name, value) in request.headers {
            switch name {
            case "authorization": authorization = value
            case "apns-topic": topic = value
            case "apns-push-type": type = value
            case "apns-id": apnsID = value
            case "apns-priority": priority = value
            default: break
            }
        }
        if let fcmPath {
            if request.path == "/token" {
                counters.verifications.add(1, ordering: .relaxed)
                return .json(
                    200, text: #"{"access_token":"\#(Self.fcmAccessToken)","token_type":"Bearer","expires_in":3600}"#)
            }
            if request.path == fcmPath {
                guard authorization == "Bearer \(Self.fcmAccessToken)" else {
                    return counted(.json(401, text: #"{"error":{"code":401,"status":"UNAUTHENTICATED"}}"#), counters)
                }
                let sent = counters.sent.add(1, ordering: .relaxed).newValue
                return counted(.json(200, text: #"{"name":"\#(request.path.dropLast(5))/\#(sent)"}"#), counters)
            }
        }
        let refusal = apnsRefusal(
            request, authorization: authorization, topic: topic, type: type, apnsID: apnsID, priority: priority,
            counters: counters)
        if refusal == nil, let watch = counters.watch, request.path.hasSuffix(watch) {
            let at = Int64(Date().timeIntervalSince1970 * 1000)
            counters.watched.withLock { $0.append("\(apnsID.lowercased()) \(at)") }
        }
        guard let refusal else {
            return counted(PushDouble.Reply(status: 200, headers: [("apns-id", apnsID)]), counters)
        }
        return counted(
            .json(refusal.status, text: #"{"reason":"\#(refusal.reason)"}"#, headers: [("apns-id", apnsID)]), counters)
    }

    /// APNs' refusal of a push, or nil; the token's signature checked once per token a connection sends.
    private func apnsRefusal(
        _ request: PushDouble.Request, authorization: String, topic: String, type: String, apnsID: String,
        priority: String, counters: APNsDoubleCounters
    ) -> APNsRules.Refusal? {
        let token: Substring
        switch (APNsRules.deviceToken(path: request.path), APNsRules.providerToken(authorization: authorization)) {
        case (.failure(let refusal), _), (_, .failure(let refusal)): return refusal
        case (.success, .success(let jwt)): token = jwt
        }
        if counters.verified.withLock({ $0[request.connection] }) != authorization {
            counters.verifications.add(1, ordering: .relaxed)
            if let refusal = check(jwt: String(token)) { return refusal }
            counters.verified.withLock { $0[request.connection] = authorization }
        }
        if let refusal = APNsRules.checkHeaders(
            topic: topic, pushType: type, priority: priority, apnsID: apnsID, for: provider)
        {
            return refusal
        }
        return APNsRules.checkPayloadSize(request.body.count)
    }

    private func counted(_ reply: PushDouble.Reply, _ counters: APNsDoubleCounters) -> PushDouble.Reply {
        if reply.status == 200 {
            counters.delivered.add(1, ordering: .relaxed)
        } else {
            counters.refused.add(1, ordering: .relaxed)
        }
        return reply
    }
}
