// Package docs holds geolimit's documentation pages (Markdown, beside this
// file) and the test that keeps their links and the README's working.
package docs
