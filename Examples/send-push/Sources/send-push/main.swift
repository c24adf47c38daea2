import Foundation
import HeraldClient

// send-push --runtime-dir DIR --user NAME [--message TEXT] [--transport lean|grpc]
//
// Sends an alert to every APNs and FCM device of a user through herald-dispatch's Send RPC, then
// follows the outcome until every delivery has finished. Prints the notification id and the final
// state; exits 1 on an RPC error or if the send is not finished within 30 s.

var settings = ["message": "Hello from another service", "transport": "lean"]
var arguments = CommandLine.arguments.dropFirst()
while let key = arguments.popFirst() {
    guard key.hasPrefix("--"), let value = arguments.popFirst() else {
        FileHandle.standardError.write(
            Data("usage: send-push --runtime-dir DIR --user NAME [--message TEXT] [--transport lean|grpc]\n".utf8))
        exit(2)
    }
    settings[String(key.dropFirst(2))] = value
}
guard let directory = settings["runtime-dir"], let user = settings["user"],
    let transport = RPCTransport(rawValue: settings["transport", default: "lean"])
else {
    FileHandle.standardError.write(Data("send-push: --runtime-dir and --user are required\n".utf8))
    exit(2)
}

/// The APNs and FCM payloads of one alert (JSON built with JSONSerialization, so any text is safe).
func payloads(_ message: String) throws -> [NativePayload] {
    let apns = try JSONSerialization.data(withJSONObject: ["aps": ["alert": message]])
    let fcm = try JSONSerialization.data(withJSONObject: ["notification": ["body": message]])
    return [
        NativePayload(platform: .apns, body: [UInt8](apns), pushType: "alert"),
        NativePayload(platform: .fcm, body: [UInt8](fcm)),
    ]
}

do {
    let herald = try HeraldClient(endpoints: .runtimeDirectory(directory, transport: transport), transport: transport)
    let final = try await herald.run { herald in
        let request = SendRequest(
            targetUser: user, payloads: try payloads(settings["message", default: "Hello from another service"]),
            sender: "send-push example")
        let sent = try await herald.dispatch.send(
            request, requestID: "send-push-\(UUID().uuidString.prefix(8))", timeout: .seconds(5))
        guard var outcome = sent.outcome else { throw ServiceError(.internal, "Send answered without an outcome") }
        print("notification \(outcome.notificationID): \(outcome.state)")
        let deadline = ContinuousClock.now + .seconds(30)
        while outcome.state == .enqueued || outcome.state == .processing {
            guard ContinuousClock.now < deadline else {
                throw ServiceError(.deadlineExceeded, "not finished within 30 s")
            }
            try await Task.sleep(for: .milliseconds(100))
            // An operator's read: this service sent as no user (`READ_SCOPE_ALL`, proto/README.md).
            outcome = try await herald.dispatch.getOutcome(
                GetOutcomeRequest(notificationID: outcome.notificationID, scope: .all))
        }
        return outcome
    }
    print("notification \(final.notificationID): \(final.state)")
    for platform in final.platforms {
        print("  \(platform.platform.name): \(platform.success) delivered, \(platform.failure) failed")
    }
} catch {
    FileHandle.standardError.write(Data("send-push: \(error)\n".utf8))
    exit(1)
}
