import Foundation
import HTTPTypes

/// An HTTP request written as text, with what NIO's HTTP/1 parser would refuse left out: a
/// request line of a method token and a target of visible characters, header lines whose names
/// are tokens, then the body. herald-fuzz's `router` target reads its inputs with it, and
/// EdgeTests' FuzzSeedTests its seeds, so that every seed is one the fuzzer takes.
package enum FuzzHTTPRequest {
    package static func parse(_ bytes: [UInt8]) -> (HTTPRequest, [UInt8])? {
        var lines: [ArraySlice<UInt8>] = []
        var start = 0
        var bodyStart = bytes.count
        var index = 0
        while index < bytes.count, lines.count <= 65 {
            if bytes[index] == UInt8(ascii: "\n") {
                var line = bytes[start..<index]
                if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
                if line.isEmpty && !lines.isEmpty {
                    bodyStart = index + 1
                    break
                }
                lines.append(line)
                start = index + 1
            }
            index += 1
        }
        if bodyStart == bytes.count, start < bytes.count, lines.count <= 65 {
            lines.append(bytes[start...])  // no empty line: the last line is a header, no body
        }
        guard let requestLine = lines.first,
            let space = requestLine.firstIndex(of: UInt8(ascii: " "))
        else { return nil }
        let target = requestLine[(space + 1)...]
        guard let method = HTTPRequest.Method(String(decoding: requestLine[..<space], as: UTF8.self)),
            target.first == UInt8(ascii: "/"), target.allSatisfy({ $0 > 0x20 && $0 != 0x7F })
        else { return nil }
        var fields = HTTPFields()
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")),
                let name = HTTPField.Name(String(decoding: line[..<colon], as: UTF8.self))
            else { continue }
            let value = String(decoding: line[(colon + 1)...], as: UTF8.self).trimmingCharacters(in: .whitespaces)
            fields.append(HTTPField(name: name, value: value))
        }
        let head = HTTPRequest(
            method: method, scheme: "http", authority: "localhost",
            path: String(decoding: target, as: UTF8.self), headerFields: fields)
        return (head, Array(bytes[min(bodyStart, bytes.count)...]))
    }
}
