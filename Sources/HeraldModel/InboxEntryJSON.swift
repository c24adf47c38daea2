import Foundation
public import HeraldProto

/// One inbox entry as JSON, the same for `herald inbox --json` and the edge's `GET /v1/test/inbox`,
/// so a test reading either sees one shape.
public struct InboxEntryJSON: Encodable, Sendable {
    public var sequence: Int64
    public var notificationId: String
    public var registrationId: String
    public var platform: String
    public var handle: String
    public var headers: [String: String]
    /// The body as text (what APNs, FCM and WNS are sent is UTF-8); `payloadBase64` is exact.
    public var payload: String
    public var payloadBase64: String
    public var recordedAtUnixMs: Int64

    public init(_ entry: InboxEntry) {
        sequence = entry.sequence
        notificationId = entry.notificationID
        registrationId = entry.registrationID
        platform = entry.platform.name
        handle = entry.handle
        headers = Dictionary(entry.headers.map { ($0.name, $0.value) }, uniquingKeysWith: { first, _ in first })
        payload = String(decoding: entry.payload, as: UTF8.self)
        payloadBase64 = Data(entry.payload).base64EncodedString()
        recordedAtUnixMs = entry.recordedAtUnixMs
    }

    /// The entry as `JSONEncoder` writes it with `.sortedKeys` and `.withoutEscapingSlashes`, at a
    /// fraction of the cost (``JSONObjectWriter``): an export writes one per inbox entry.
    public var sortedJSON: [UInt8] {
        var writer = JSONObjectWriter()
        writer.member("handle", handle)
        writer.member("headers", headers)
        writer.member("notificationId", notificationId)
        writer.member("payload", payload)
        writer.member("payloadBase64", payloadBase64)
        writer.member("platform", platform)
        writer.member("recordedAtUnixMs", recordedAtUnixMs)
        writer.member("registrationId", registrationId)
        writer.member("sequence", sequence)
        return writer.finished
    }
}
