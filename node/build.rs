//! napi-rs's build step (links against Node's N-API symbols at load time).

fn main() {
    napi_build::setup();
}
