import Foundation
import PoopyPalsData
import Values

struct ProfileBody: Encodable {
    let user: UserBody
    let device: DeviceBody?
}
