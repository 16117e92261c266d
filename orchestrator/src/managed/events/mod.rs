//! A session's events: the API's event types ([`wire`]) and the projection of a thread's stored
//! events onto them ([`project`]).
