import Foundation
import HeraldModel

/// A direct batch send's body (`POST /{hub}/messages/$batch?direct`): multipart/mixed with a
/// `notification` part and a `devices` part, in every spelling the SDKs and docs use
/// (docs/notification-hubs.md, "Sends"): `boundary = "b"` with spaces, `Content-type`, and the docs' single-quoted arrays.
///
/// Parsed here rather than with a multipart library: the body is at most 64 KB and two parts, and
/// the leniency NH's clients need (boundary parameter, quoting, part names) is most of the work.
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
            let match = contentType.firstMatch(of: /(?i)boundary\s*=\s*(?:"([^"]+)"|([^;\s]+))/),
            let boundary = match.1 ?? match.2
        else {
            throw ServiceError.invalidArgument(
                #"a batch send is multipart/mixed; boundary="…" with a notification and a devices part"#)
        }
        // RFC 2046 §5.1.1: 1 to 70 characters. A longer one is only a way to make the search slow.
        guard boundary.utf8.count <= 70 else {
            throw ServiceError.invalidArgument("a multipart boundary is at most 70 characters")
        }
        let delimiter = Array(("--" + boundary).utf8)
        var notification: (body: [UInt8], type: String?)?
        var devices: [String]?
        for part in split(body, by: delimiter) {
            let (headers, content) = headersAndContent(part)
            guard let disposition = headers["content-disposition"],
                let name = disposition.firstMatch(of: /(?i)name\s*=\s*"?([A-Za-z]+)"?/)?.1.lowercased()
            else { continue }
            switch name {
            case "notification": notification = (content, headers["content-type"])
            case "devices": devices = try handles(content)
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

    /// The parts between delimiters (the preamble and the epilogue dropped).
    package static func split(_ body: [UInt8], by delimiter: [UInt8]) -> [ArraySlice<UInt8>] {
        let starts = delimiterStarts(body, delimiter)
        guard starts.count >= 2 else { return [] }
        var parts: [ArraySlice<UInt8>] = []
        for (from, to) in zip(starts, starts.dropFirst()) {
            var end = to
            // The line break before a delimiter belongs to the delimiter.
            if end > from, body[end - 1] == UInt8(ascii: "\n") { end -= 1 }
            if end > from, body[end - 1] == UInt8(ascii: "\r") { end -= 1 }
            let start = from + delimiter.count
            if start < end { parts.append(body[start..<end]) }
        }
        return parts
    }

    /// A part's headers (lower-case names) and content; headers end at the first empty line.
    package static func headersAndContent(_ part: ArraySlice<UInt8>) -> ([String: String], [UInt8]) {
        let bytes = Array(part)
        var headers: [String: String] = [:]
        var line = 0
        var lines: [String] = []
        var contentStart = bytes.count
        var i = 0
        // Skip the rest of the delimiter line.
        while i < bytes.count, bytes[i] != UInt8(ascii: "\n") { i += 1 }
        i += 1
        line = i
        while i <= bytes.count {
            if i == bytes.count || bytes[i] == UInt8(ascii: "\n") {
                var text = String(decoding: bytes[min(line, bytes.count)..<i], as: UTF8.self)
                if text.hasSuffix("\r") { text.removeLast() }
                if text.isEmpty {
                    contentStart = min(i + 1, bytes.count)
                    break
                }
                lines.append(text)
                line = i + 1
            }
            i += 1
        }
        for text in lines {
            guard let colon = text.firstIndex(of: ":") else { continue }
            headers[text[..<colon].trimmingCharacters(in: .whitespaces).lowercased()] =
                text[text.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return (headers, Array(bytes[contentStart...]))
    }

    /// Where each delimiter line starts: at the body's start or just after a line feed (RFC 2046
    /// §5.1.1: a delimiter is a line of its own). Linear in the body: a line is compared with the
    /// delimiter only up to its first differing byte, and a compare reaches the delimiter's length
    /// (at most 72 bytes) only on a line at least that long. The byte-by-byte search at every
    /// position it replaces took the body's length times the boundary's (20 s for a 120 KB body of
    /// dashes and a 2,500-character boundary, before boundaries were bounded).
    package static func delimiterStarts(_ body: [UInt8], _ delimiter: [UInt8]) -> [Int] {
        guard !delimiter.isEmpty else { return [] }
        var starts: [Int] = []
        var line = 0
        while line + delimiter.count <= body.count {
            if body[line..<(line + delimiter.count)].elementsEqual(delimiter) { starts.append(line) }
            guard let feed = body[line...].firstIndex(of: UInt8(ascii: "\n")) else { break }
            line = feed + 1
        }
        return starts
    }
}
