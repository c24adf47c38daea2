import Foundation
import HeraldModel

/// A direct batch send's body (`POST /{hub}/messages/$batch?direct`): multipart/mixed with a
/// `notification` part and a `devices` part, in every spelling the SDKs and docs use
/// (docs/notification-hubs.md, "Sends"): `boundary = "b"` with spaces, `Content-type`, and the docs' single-quoted arrays.
///
/// The parts come from HeraldModel's ``Multipart``, which is as lenient as NH's clients need
/// (boundary parameter, quoting, part names).
package enum NHBatch {
    package struct Parts {
        package var notification: [UInt8]
        package var notificationContentType: String?
        package var devices: [String]
    }

    package static let missingPart = ServiceError.invalidArgument(
        "Could not find a part of the multipart content supplied")

    package static func parse(contentType: String, body: [UInt8]) throws -> Parts {
        guard contentType.lowercased().hasPrefix("multipart/"),
            let boundary = Multipart.boundary(contentType: contentType)
        else {
            throw ServiceError.invalidArgument(
                #"a batch send is multipart/mixed; boundary="…" with a notification and a devices part"#)
        }
        guard boundary.utf8.count <= Multipart.maxBoundaryBytes else {
            throw ServiceError.invalidArgument("a multipart boundary is at most 70 characters")
        }
        var notification: (body: [UInt8], type: String?)?
        var devices: [String]?
        for part in Multipart.parts(body, boundary: boundary) {
            guard let name = part.name?.lowercased() else { continue }
            switch name {
            case "notification": notification = (part.content, part.contentType)
            case "devices": devices = try handles(part.content)
            default: continue
            }
        }
        guard let notification, let devices else { throw missingPart }
        guard !devices.isEmpty else { throw ServiceError.invalidArgument("the devices part lists no device handle") }
        return Parts(notification: notification.body, notificationContentType: notification.type, devices: devices)
    }

    /// The devices part: a JSON array of strings; the docs' `['a','b']` is read too.
    package static func handles(_ content: [UInt8]) throws -> [String] {
        if let list = try? JSONSerialization.jsonObject(with: Data(content)) as? [String] { return list }
        let requoted = String(decoding: content, as: UTF8.self).replacingOccurrences(of: "'", with: "\"")
        if let list = try? JSONSerialization.jsonObject(with: Data(requoted.utf8)) as? [String] { return list }
        throw ServiceError.invalidArgument(
            #"the devices part is a JSON array of device handles: ["handle1","handle2"]"#)
    }
}
