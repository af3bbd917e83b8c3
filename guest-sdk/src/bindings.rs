//! The WIT bindings of the `controller` world, generated from `wit/`.

wit_bindgen::generate!({
    path: "../wit",
    world: "controller",
    pub_export_macro: true,
    export_macro_name: "__export_world",
    default_bindings_module: "::krec_guest::bindings",
    runtime_path: "::krec_guest::__private::wit_bindgen::rt",
});
