//! What the walls stopped becomes the thread's event: `limit_reached`, stored and streamed like
//! every other, so a person sees it on the thread's stream and the page.

use crate::api::events::ThreadEvent;

use super::Pipeline;

impl Pipeline {
    /// Records each process the walls stop ([`crate::pool::Pool::take_breaches`]) on its
    /// thread, until the daemon stops. Called once, at start-up.
    pub fn serve_breaches(&self) {
        let Some(mut breaches) = self.inner.parts.pool.take_breaches() else {
            return;
        };
        let pipeline = self.clone();
        tokio::spawn(async move {
            loop {
                let breach = tokio::select! {
                    breach = breaches.recv() => breach,
                    _ = pipeline.inner.stopping.cancelled() => None,
                };
                let Some((thread, breach)) = breach else {
                    return;
                };
                pipeline.inner.parts.events.emit(
                    &thread,
                    None,
                    ThreadEvent::LimitReached(breach.into()),
                );
            }
        });
    }
}
