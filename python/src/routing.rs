//! `Router`: which room decides a request, the core's `velvet_rope::routing::Router`.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use velvet_rope::routing::{self, CaseRule, Route};

/// Which room decides a request: path prefixes mapped to rooms (the longest wins), a default
/// room, bypass prefixes, and a case rule. `route(target)` reads the target as the servers
/// and frameworks in front of the application may (percent-escapes, `..`, `//`, absolute
/// form, case) and answers with a room's name, or `None` (bypassed, or in no room).
#[pyclass(frozen, module = "velvet_rope._velvet_rope")]
pub struct Router {
    inner: routing::Router,
    /// The rooms' names as Python strings, by index: a route answers with a shared one.
    names: Vec<Py<PyString>>,
}

#[pymethods]
impl Router {
    /// `rooms`: `(prefix, room)` pairs; `room`: the default room; `bypass`: prefixes never
    /// decided; `case_sensitive`: as the application's router compares paths. Raises
    /// `ValueError` for a prefix that does not start with `/` (or holds `?`, `#` or control
    /// characters), or when there is neither a default room nor a prefix.
    #[new]
    #[pyo3(signature = (rooms = Vec::new(), room = None, bypass = Vec::new(), case_sensitive = true))]
    fn new(
        py: Python<'_>,
        rooms: Vec<(String, String)>,
        room: Option<String>,
        bypass: Vec<String>,
        case_sensitive: bool,
    ) -> PyResult<Self> {
        let case = if case_sensitive {
            CaseRule::Sensitive
        } else {
            CaseRule::Insensitive
        };
        let inner = routing::Router::new(rooms, room.as_deref(), bypass, case)
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
        let names = inner
            .rooms()
            .iter()
            .map(|n| PyString::intern(py, n).unbind())
            .collect();
        Ok(Self { inner, names })
    }

    /// The room of the request with `target`: its path (ASGI's `scope["path"]`, WSGI's
    /// `PATH_INFO` as bytes) or its request-target as received (`str` or `bytes`). `None`:
    /// not decided.
    fn route(&self, py: Python<'_>, target: &Bound<'_, PyAny>) -> PyResult<Option<Py<PyString>>> {
        let bytes = if let Ok(s) = target.cast::<PyString>() {
            s.to_str()?.as_bytes()
        } else if let Ok(b) = target.cast::<PyBytes>() {
            b.as_bytes()
        } else {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "a request target must be str or bytes",
            ));
        };
        Ok(match self.inner.route(bytes) {
            Route::Room(i) => Some(self.names[i].clone_ref(py)),
            Route::Bypass | Route::Unrouted => None,
        })
    }

    /// The rooms it sends requests to.
    #[getter]
    fn rooms(&self) -> Vec<String> {
        self.inner.rooms().to_vec()
    }

    /// Whether every request goes to the default room (no prefixes, no bypass): the target
    /// need not be read.
    #[getter]
    fn every_path(&self) -> bool {
        self.inner.every_path()
    }

    fn __repr__(&self) -> String {
        format!("Router(rooms={:?})", self.inner.rooms())
    }
}
