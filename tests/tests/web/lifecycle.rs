//! A hundred threads on the page: the list shows a page and "More threads" the next; the search
//! box finds a thread by a word of its title; "Older messages" shows what the last page left
//! out; after retention compacted the thread's events it says so and still follows new turns;
//! Delete removes the open thread.

use serde_json::json;

use crate::support::{Page, QUICK, TURN};

/// The ids the sidebar lists.
const LISTED: &str = "return [...document.querySelectorAll('[data-testid=thread-list] li')].map((li) => li.dataset.threadId);";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_pages_searches_shows_older_messages_and_deletes() {
    let page = Page::open(|_| {}).await;
    let mut made = Vec::new();
    for _ in 0..55 {
        made.push(page.daemon.create_thread().await);
    }
    let long = made[0].clone();
    for n in 0..26 {
        page.daemon.reply(&long, &format!("turn {n}")).await;
    }
    page.daemon
        .patch(
            &format!("/api/threads/{}", made[1]),
            json!({"title": "Harbour dues"}),
        )
        .await;
    page.browser.client.refresh().await.expect("reload");
    page.wait_js(
        QUICK,
        "a page of threads and More threads",
        &format!("const ids = (() => {{ {LISTED} }})(); return ids.length === 50 && !document.querySelector('[data-testid=more-threads]').hidden;"),
    )
    .await;
    page.browser
        .hook("more-threads")
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let all = page
        .wait_js(
            QUICK,
            "every thread after More threads",
            &format!("const ids = (() => {{ {LISTED} }})(); return ids.length === 55 && document.querySelector('[data-testid=more-threads]').hidden && ids;"),
        )
        .await;
    let listed: Vec<String> = serde_json::from_value(all).unwrap();
    assert_eq!(
        listed[..2],
        [made[1].clone(), long.clone()],
        "the most recently active first: renamed, then talked to"
    );
    let mut sorted = listed.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 55);

    page.browser
        .hook("thread-search")
        .await
        .unwrap()
        .send_keys("harbour")
        .await
        .unwrap();
    let found = page
        .wait_js(
            QUICK,
            "the search finds the titled thread",
            &format!("const ids = (() => {{ {LISTED} }})(); return ids.length === 1 && ids[0];"),
        )
        .await;
    assert_eq!(found, json!(made[1]));

    // The long thread shows its last page, then the older messages on demand.
    let users = "return document.querySelectorAll('[data-testid=message][data-role=user]').length;";
    page.browser
        .client
        .goto(&format!("{}/?thread={long}", page.link.url()))
        .await
        .unwrap();
    // Once the page has read the whole event log (which names every message), it still shows
    // the last page only.
    let events = page
        .daemon
        .daemon()
        .store
        .events_after(&plugin_contract::ThreadId::from_string(&long), 0, 10_000)
        .await
        .unwrap();
    let last_event = events.last().expect("the thread's events").id;
    page.wait_js(TURN, "the event log read", &format!("return Number(document.querySelector('[data-testid=messages]').dataset.lastEventId) >= {last_event};"))
        .await;
    let shown = page
        .wait_js(QUICK, "the last page: 25 turns", &format!("return !document.querySelector('[data-testid=older-messages]').hidden && (() => {{ {users} }})();"))
        .await;
    assert_eq!(shown, json!(25));
    page.browser
        .hook("older-messages")
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    page.wait_js(QUICK, "all 26 turns", &format!("return (() => {{ {users} }})() === 26 && document.querySelector('[data-testid=older-messages]').hidden;"))
        .await;

    // Retention removes every turn's events: the page says so, shows the same last page, and a
    // new turn (whose events come after the cut) still appears once, at the end.
    let store = &page.daemon.daemon().store;
    let cutoff = orchestrator::store::now_text();
    assert!(store.compact_events(&cutoff, 100).await.unwrap() > 0);
    page.browser
        .client
        .goto(&format!("{}/?thread={long}", page.link.url()))
        .await
        .unwrap();
    let shown = page
        .wait_js(TURN, "the compacted note and the last page", &format!("return !document.querySelector('[data-testid=compacted]').hidden && !document.querySelector('[data-testid=older-messages]').hidden && (() => {{ {users} }})();"))
        .await;
    assert_eq!(shown, json!(25));
    page.daemon.reply(&long, "after the cut").await;
    let last = page
        .wait_js(TURN, "the new turn at the end", "const users = [...document.querySelectorAll('[data-testid=message][data-role=user]')]; return users.length === 26 && users[25].textContent;")
        .await;
    assert!(
        last.as_str().unwrap_or_default().contains("after the cut"),
        "{last}"
    );

    page.browser
        .client
        .execute("window.confirm = () => true; document.querySelector('[data-testid=delete-thread]').click();", vec![])
        .await
        .unwrap();
    page.wait_js(
        QUICK,
        "the deleted thread is closed and gone from the list",
        &format!("const ids = (() => {{ {LISTED} }})(); return !document.querySelector('[data-testid=empty]').hidden && !ids.includes({long:?}) && ids.length > 0;"),
    )
    .await;
    let (status, _) = page.daemon.get(&format!("/api/threads/{long}")).await;
    assert_eq!(status, 404);
    page.finish(false).await;
}
