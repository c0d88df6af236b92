import Foundation
import PoopyPalsData
import Values

struct ProfileBody: Encodable, JSONWritable {
    let user: UserBody
    let device: DeviceBody?

    func write(to output: inout JSONOutput) throws {
        output.raw("{")
        if let device {
            output.raw(#""device":"#)
            try device.write(to: &output)
            output.raw(",")
        }
        output.raw(#""user":"#)
        try user.write(to: &output)
        output.raw("}")
    }
}
