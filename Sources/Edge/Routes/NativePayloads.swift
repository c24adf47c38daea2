import Foundation
import HeraldModel
public import HeraldProto
import HeraldRPC
import HeraldService

/// The exact bytes each push carries, per the tutorial contract. The edge builds them because it
/// knows the contract; dispatch only checks each platform's rules and delivers.
public enum NativePayloads {
    /// Secure push: only the id crosses Apple, Google or Microsoft.
    public static func secure(id: Int64) -> [NativePayload] {
        [
            NativePayload(
                platform: .apns, body: Array(#"{"aps":{"content-available":1},"secureId":"\#(id)"}"#.utf8),
                pushType: "background", priority: 5),
            NativePayload(platform: .fcm, body: Array(#"{"data":{"secureId":"\#(id)"}}"#.utf8)),
            NativePayload(
                platform: .wns, body: Array("\(id)".utf8), pushType: "wns/raw", contentType: "application/octet-stream"),
            NativePayload(platform: .browser, body: Array(#"{"secureId":"\#(id)"}"#.utf8), priority: 5),
        ]
    }

    /// Rich push: a silent push with the content's id, message and type; the device fetches the
    /// content itself. APNs is the contract's; FCM (data message) and WNS (raw, the id) are Herald's
    /// equivalents for the other platforms.
    public static func rich(id: Int64, message: String, richType: String) -> [NativePayload] {
        let fields = #""richId":"\#(id)","richMessage":\#(jsonString(message)),"richType":\#(jsonString(richType))"#
        return [
            NativePayload(
                platform: .apns, body: Array(#"{"aps":{"content-available":1,"sound":""},\#(fields)}"#.utf8),
                pushType: "background", priority: 5),
            NativePayload(platform: .fcm, body: Array(#"{"data":{\#(fields)}}"#.utf8)),
            NativePayload(
                platform: .wns, body: Array("\(id)".utf8), pushType: "wns/raw", contentType: "application/octet-stream"),
            NativePayload(platform: .browser, body: Array("{\(fields)}".utf8), priority: 5),
        ]
    }

    /// The `richType` of content of `contentType` unless the sender names one: `img` for images,
    /// `file` otherwise.
    public static func richType(contentType: String) -> String { contentType.hasPrefix("image/") ? "img" : "file" }

    /// A visible alert with `text`: "Notify users" sends "From <sender>: <message>" this way.
    /// Browsers get `{"message":…}` for their service worker to show.
    public static func alert(_ text: String, platforms: [Platform] = Platform.delivered) -> [NativePayload] {
        platforms.map { platform in
            switch platform {
            case .apns:
                NativePayload(
                    platform: .apns, body: Array(#"{"aps":{"alert":\#(jsonString(text))}}"#.utf8), pushType: "alert",
                    priority: 10)
            case .fcm:
                NativePayload(platform: .fcm, body: Array(#"{"data":{"message":\#(jsonString(text))}}"#.utf8))
            case .browser:
                NativePayload(platform: .browser, body: Array(#"{"message":\#(jsonString(text))}"#.utf8), priority: 10)
            default:
                NativePayload(
                    platform: .wns,
                    body: Array(
                        #"<toast><visual><binding template="ToastText01"><text id="1">\#(xmlEscaped(text))</text></binding></visual></toast>"#
                            .utf8),
                    pushType: "wns/toast", contentType: "text/xml")
            }
        }
    }

    /// `value` as a JSON string literal, quotes included. (The tutorial pasted text in raw, so a
    /// quote broke the payload.)
    public static func jsonString(_ value: String) -> String { jsonStringLiteral(value) }

    /// `value` with XML's five special characters escaped, and characters XML 1.0 cannot carry
    /// (C0 controls other than tab, newline, return) dropped.
    public static func xmlEscaped(_ value: String) -> String { HeraldModel.xmlEscaped(value) }
}

/// The image the `rich` profile sends when no `rich-image` is configured: a 64×64 PNG of Herald's
/// "H", 274 bytes, kept in source so the edge binary needs no resource bundle beside it. The same
/// bytes are `services/edge/herald.png` (a unit test checks they match).
public enum DefaultRichImage {
    public static let contentType = "image/png"
    public static let bytes: [UInt8] = Data(base64Encoded: base64).map(Array.init) ?? []
    static let base64 =
        "iVBORw0KGgoAAAANSUhEUgAAAEAAAABACAYAAACqaXHeAAAA2UlEQVR42u3bwQ2DMAwFUA5ds/t3i3aBCtHGSWz8LHEF/SdEAtjHodSyej0f7ytHu8C3AokKXQ5jdvC0EKuDp4LYHX4bQpbgWyCyhl+CkD38VIQq4acgVAsfilA1fBhCa4Dq4YcQ/r3YWa08xzBCa4CR2y0rwE8IrQFGHziZAS4hAOgMELHmZgc4RQAAoDFA1L67AsBXBAALACIKAAAAAABYBgHk3Q16FwAAoC6Ab4IAAPgxAsDPUQAaJLTIANAmp1FSq6xmae3yBiaMzBiaMjZncNLorLp3fQD8JpY1MDaVTQAAAABJRU5ErkJggg=="
}
