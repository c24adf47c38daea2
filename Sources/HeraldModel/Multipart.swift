/// A multipart body (RFC 2046 §5.1; `multipart/form-data`, RFC 7578) split into its parts: NH's
/// `$batch` send and the console's forms read their bodies through it.
///
/// Written here rather than taken from multipart-kit: its parser (4.7.1, the version available)
/// traps on a part header name holding a byte of 0x80 or more (`isAllowedHeaderFieldNameCharacter`
/// indexes a 128-entry table), which any client can send to an unauthenticated form. This one
/// reads the whole body, already bounded by the caller, in one linear pass, and never traps:
/// headers are read as text whatever their bytes, and a part without a name is the caller's to
/// skip. The `batch` and `router` fuzz targets run it.
package enum Multipart {
    /// One part: its headers (names in lower case; the last of a repeated name wins) and content.
    package struct Part: Sendable, Equatable {
        package var headers: [String: String]
        package var content: [UInt8]

        /// The `name` parameter of its Content-Disposition (a form field's name).
        package var name: String? { headers["content-disposition"].flatMap { Multipart.parameter("name", of: $0) } }
        /// Its Content-Type; in a form, only a file's part has one.
        package var contentType: String? { headers["content-type"] }
    }

    /// RFC 2046 §5.1.1: a boundary is 1 to 70 characters. A longer one is only a way to make the
    /// search slow.
    package static let maxBoundaryBytes = 70

    /// The `boundary` parameter of a multipart Content-Type (quoted or not); nil when there is none.
    /// Its length is the caller's to check against ``maxBoundaryBytes``.
    package static func boundary(contentType: String) -> String? {
        guard let value = parameter("boundary", of: contentType), !value.isEmpty else { return nil }
        return value
    }

    /// The parts of `body` between delimiters (`--boundary` lines), the preamble and the epilogue
    /// dropped. Linear in the body.
    package static func parts(_ body: [UInt8], boundary: String) -> [Part] {
        split(body, by: Array(("--" + boundary).utf8)).map { slice in
            let (headers, content) = headersAndContent(slice)
            return Part(headers: headers, content: content)
        }
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
        var lines: [String] = []
        var contentStart = bytes.count
        var i = 0
        // Skip the rest of the delimiter line.
        while i < bytes.count, bytes[i] != UInt8(ascii: "\n") { i += 1 }
        i += 1
        var line = i
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
            headers[text[..<colon].trimmingSpaces.lowercased()] = String(
                text[text.index(after: colon)...].trimmingSpaces)
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

    /// Parameter `name` (case-insensitive) of a header value such as `form-data; name="file";
    /// filename="a.pem"` or `multipart/form-data; boundary=x`: quoted (`\` escapes the next
    /// character) or a token up to `;` or white space. One pass over the value; `filename=` is not
    /// `name=`.
    package static func parameter(_ name: String, of value: String) -> String? {
        let wanted = Array(name.lowercased().utf8)
        let bytes = Array(value.utf8)
        var i = 0
        // Parameters follow the first `;`.
        while i < bytes.count, bytes[i] != UInt8(ascii: ";") { i += 1 }
        while i < bytes.count {
            i += 1  // past `;`
            while i < bytes.count, bytes[i] == UInt8(ascii: " ") || bytes[i] == UInt8(ascii: "\t") { i += 1 }
            let keyStart = i
            while i < bytes.count, bytes[i] != UInt8(ascii: "="), bytes[i] != UInt8(ascii: ";") { i += 1 }
            var keyEnd = i
            while keyEnd > keyStart, bytes[keyEnd - 1] == UInt8(ascii: " ") || bytes[keyEnd - 1] == UInt8(ascii: "\t") {
                keyEnd -= 1
            }
            guard i < bytes.count, bytes[i] == UInt8(ascii: "=") else { continue }
            i += 1
            while i < bytes.count, bytes[i] == UInt8(ascii: " ") || bytes[i] == UInt8(ascii: "\t") { i += 1 }
            var parameterValue: [UInt8] = []
            if i < bytes.count, bytes[i] == UInt8(ascii: "\"") {
                i += 1
                while i < bytes.count, bytes[i] != UInt8(ascii: "\"") {
                    if bytes[i] == UInt8(ascii: "\\"), i + 1 < bytes.count { i += 1 }
                    parameterValue.append(bytes[i])
                    i += 1
                }
                // Past the closing quote, then to the next `;`.
                while i < bytes.count, bytes[i] != UInt8(ascii: ";") { i += 1 }
            } else {
                while i < bytes.count, bytes[i] != UInt8(ascii: ";"), bytes[i] != UInt8(ascii: " "),
                    bytes[i] != UInt8(ascii: "\t")
                {
                    parameterValue.append(bytes[i])
                    i += 1
                }
                while i < bytes.count, bytes[i] != UInt8(ascii: ";") { i += 1 }
            }
            let key = bytes[keyStart..<keyEnd].map { $0 >= 65 && $0 <= 90 ? $0 + 32 : $0 }
            if key == wanted { return String(decoding: parameterValue, as: UTF8.self) }
        }
        return nil
    }
}

extension Substring {
    /// Without leading and trailing spaces and tabs (HTTP's optional white space).
    package var trimmingSpaces: Substring {
        var text = self
        while let first = text.first, first == " " || first == "\t" { text = text.dropFirst() }
        while let last = text.last, last == " " || last == "\t" { text = text.dropLast() }
        return text
    }
}
