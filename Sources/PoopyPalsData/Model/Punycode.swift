/// Punycode (RFC 3492), the encoding of IDNA A-labels (`exämple` ⇄ `xn--exmple-cua`). No listed Swift package
/// offers IDNA, so this file holds the algorithm, and only it: the mapping before it is `Email`'s.
enum Punycode {
    private static let base = 36, tMin = 1, tMax = 26, skew = 38, damp = 700, initialBias = 72, initialN = 128

    private static func adapt(_ delta: Int, _ numPoints: Int, _ firstTime: Bool) -> Int {
        var delta = firstTime ? delta / damp : delta / 2
        delta += delta / numPoints
        var k = 0
        while delta > ((base - tMin) * tMax) / 2 {
            delta /= base - tMin
            k += base
        }
        return k + (base - tMin + 1) * delta / (delta + skew)
    }

    private static func digit(_ value: Int) -> Character {
        Character(Unicode.Scalar(UInt8(value < 26 ? value + 97 : value + 22)))
    }

    /// The Punycode of `input` (without the `xn--` prefix), or nil where a count would overflow.
    static func encode(_ input: [Unicode.Scalar]) -> String? {
        var output = String(String.UnicodeScalarView(input.filter(\.isASCII)))
        let basicCount = output.unicodeScalars.count
        var handled = basicCount
        if basicCount > 0 { output.append("-") }
        var n = initialN, delta = 0, bias = initialBias
        let values = input.map { Int($0.value) }
        while handled < values.count {
            guard let m = values.filter({ $0 >= n }).min() else { return nil }
            let (step, overflow) = (m - n).multipliedReportingOverflow(by: handled + 1)
            guard !overflow, delta <= Int(Int32.max) - step else { return nil }
            delta += step
            n = m
            for value in values {
                if value < n {
                    delta += 1
                    guard delta <= Int(Int32.max) else { return nil }
                }
                if value == n {
                    var q = delta
                    var k = base
                    while true {
                        let t = k <= bias ? tMin : (k >= bias + tMax ? tMax : k - bias)
                        if q < t { break }
                        output.append(digit(t + (q - t) % (base - t)))
                        q = (q - t) / (base - t)
                        k += base
                    }
                    output.append(digit(q))
                    bias = adapt(delta, handled + 1, handled == basicCount)
                    delta = 0
                    handled += 1
                }
            }
            delta += 1
            n += 1
        }
        return output
    }

    /// The scalars `input` (without `xn--`, lower-case) encodes, or nil when it is not valid Punycode.
    static func decode(_ input: String) -> [Unicode.Scalar]? {
        let scalars = Array(input.unicodeScalars)
        guard scalars.allSatisfy(\.isASCII) else { return nil }
        var output: [Unicode.Scalar] = []
        var index = 0
        if let separator = scalars.lastIndex(of: "-") {
            output = Array(scalars[..<separator])
            index = separator + 1
        }
        var n = initialN, i = 0, bias = initialBias
        while index < scalars.count {
            let oldI = i
            var w = 1
            var k = base
            while true {
                guard index < scalars.count else { return nil }
                let c = scalars[index].value
                index += 1
                let value: Int
                switch c {
                case 97...122: value = Int(c) - 97
                case 48...57: value = Int(c) - 22
                default: return nil
                }
                let (product, overflow) = value.multipliedReportingOverflow(by: w)
                guard !overflow, i <= Int(Int32.max) - product else { return nil }
                i += product
                let t = k <= bias ? tMin : (k >= bias + tMax ? tMax : k - bias)
                if value < t { break }
                let (next, wOverflow) = w.multipliedReportingOverflow(by: base - t)
                guard !wOverflow, next <= Int(Int32.max) else { return nil }
                w = next
                k += base
            }
            bias = adapt(i - oldI, output.count + 1, oldI == 0)
            n += i / (output.count + 1)
            i %= output.count + 1
            guard n <= 0x10FFFF, let scalar = Unicode.Scalar(UInt32(n)), !scalar.isASCII else { return nil }
            output.insert(scalar, at: i)
            i += 1
        }
        return output
    }
}
